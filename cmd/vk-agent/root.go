package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The job's image as the guest's root: the node attaches the image's
// file system (a copy-on-write overlay of a disk made from the image) as
// the first virtio disk and names it on the kernel command line as
// vk.root=<device>. The init then loads the block and file-system modules
// listed in rootModulesList, mounts the disk, moves /proc, /sys, /dev and
// /tmp onto it, copies itself to /run/vk/vk-agent there (the initramfs is
// unreachable once the root moved) and makes the disk the root; the
// server then runs from that copy, every script in the image's tree.

// rootModulesList names the modules the init loads before it mounts the
// image's disk, in order.
const rootModulesList = "/etc/vk-agent/modules.root"

// newRoot is where the image's disk is mounted before it becomes /.
const newRoot = "/newroot"

// agentInRoot is where the agent's copy lives in the image's tree.
const agentInRoot = "/run/vk/vk-agent"

// rootDevice is the vk.root=<device> of the kernel command line, "" when
// the guest keeps the initramfs as its root.
func rootDevice() string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "vk.root="); ok {
			return v
		}
	}
	return ""
}

// switchRoot makes dev's ext4 file system the root, as described above,
// and returns the path of the agent's copy in it.
func switchRoot(dev string) (string, error) {
	loadModules(rootModulesList)
	deadline := time.Now().Add(portWait)
	for {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("root device %s did not appear", dev)
		}
		time.Sleep(10 * time.Millisecond) // polling devtmpfs for the disk
	}
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount(dev, newRoot, "ext4", 0, ""); err != nil {
		return "", fmt.Errorf("mount %s: %w", dev, err)
	}
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp"} {
		dst := filepath.Join(newRoot, d)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		if err := unix.Mount(d, dst, "", unix.MS_MOVE, ""); err != nil {
			return "", fmt.Errorf("move %s: %w", d, err)
		}
	}
	run := filepath.Join(newRoot, filepath.Dir(agentInRoot))
	if err := os.MkdirAll(run, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", run, "tmpfs", 0, "mode=0755"); err != nil {
		return "", fmt.Errorf("mount %s: %w", run, err)
	}
	if err := copyExecutable("/init", filepath.Join(newRoot, agentInRoot)); err != nil {
		return "", err
	}
	if err := os.Chdir(newRoot); err != nil {
		return "", err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return "", fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return "", fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return "", err
	}
	_ = os.MkdirAll("/dev/pts", 0o755)
	return agentInRoot, nil
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
