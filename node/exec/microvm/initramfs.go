package microvm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path"
	"strings"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as its
// initramfs.
type cpioWriter struct {
	w   *bufio.Writer
	ino int
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) error {
	c.ino++
	name = strings.TrimPrefix(name, "/")
	fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad(110 + len(name) + 1)
	c.w.Write(data)
	c.pad(len(data))
	return nil
}

func (c *cpioWriter) pad(n int) {
	for ; n%4 != 0; n++ {
		c.w.WriteByte(0)
	}
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

// initramfsSpec is what the guest's initramfs holds.
type initramfsSpec struct {
	agent   string   // the static vk-agent, /init
	busybox string   // a static busybox, /bin/busybox and its applets
	modules []string // kernel modules, loaded by the init in this order
	// rootModules are loaded by the init, in this order, only before it
	// mounts an image's disk as the root.
	rootModules []string
	// netModules are loaded by the init, in this order, only when the
	// guest is on its job's network.
	netModules []string
}

// writeInitramfs writes the initramfs: vk-agent as /init, busybox and a
// link for each of its applets in /bin (the shell and tools of the
// scripts), the kernel modules the init loads (virtio drivers), and the
// directories the init mounts.
func writeInitramfs(w io.Writer, s initramfsSpec) error {
	c := &cpioWriter{w: bufio.NewWriter(w)}
	for _, d := range []string{"bin", "dev", "etc", "etc/vk-agent", "lib", "lib/modules", "proc", "sys", "tmp", "builds", "root", "usr", "usr/bin", "sbin"} {
		c.entry(d, sIFDIR|0o755, 0, 0, nil)
	}
	c.entry("dev/console", sIFCHR|0o600, 5, 1, nil)
	agent, err := os.ReadFile(s.agent)
	if err != nil {
		return fmt.Errorf("vk-agent: %w", err)
	}
	c.entry("init", sIFREG|0o755, 0, 0, agent)
	bb, err := os.ReadFile(s.busybox)
	if err != nil {
		return fmt.Errorf("busybox: %w", err)
	}
	c.entry("bin/busybox", sIFREG|0o755, 0, 0, bb)
	list, err := osexec.Command(s.busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			c.entry("bin/"+applet, sIFLNK|0o777, 0, 0, []byte("busybox"))
		}
	}
	for _, list := range []struct {
		name    string
		modules []string
	}{{"modules", s.modules}, {"modules.root", s.rootModules}, {"modules.net", s.netModules}} {
		var order bytes.Buffer
		for _, m := range list.modules {
			b, err := os.ReadFile(m)
			if err != nil {
				return fmt.Errorf("kernel module: %w", err)
			}
			g := "lib/modules/" + path.Base(m)
			c.entry(g, sIFREG|0o644, 0, 0, b)
			fmt.Fprintf(&order, "/%s\n", g)
		}
		c.entry("etc/vk-agent/"+list.name, sIFREG|0o644, 0, 0, order.Bytes())
	}
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.w.Flush()
}
