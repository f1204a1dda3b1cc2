// Command vk-agent is the guest side of the microVM backend: a static
// binary the node puts into a job's VM, serving the node's requests
// (node/exec/vmproto) — run a stage's script, signal it, archive or
// extract a path of the job tree — over one stream: vsock when the VM has
// a vsock device, else a virtio-serial port, or its stdin/stdout (tests).
//
// As PID 1 (the VM's init) it mounts /proc, /sys, /dev and /tmp, makes
// the job image's disk the root when the kernel command line names one
// (vk.root=, see root.go), brings up the job's private network when the
// command line gives it one (vk.net=, see net.go), runs a copy of itself
// as the server, reaps every orphan, and powers the VM off
// when the server ends (the node closed the stream). Build it with
// CGO_ENABLED=0.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vk-ci/vk/node/exec/vmproto"
	"golang.org/x/sys/unix"
)

// DefaultPort is the virtio-serial port's name, as the node's QEMU
// command line gives it (-device virtserialport,name=vk.agent).
const DefaultPort = "/dev/virtio-ports/vk.agent"

func main() {
	vsock := flag.Uint("vsock", 0, "serve the one connection accepted on this vsock port")
	port := flag.String("port", DefaultPort, "serve on this virtio-serial port (when -vsock is 0)")
	stdio := flag.Bool("stdio", false, "serve on stdin/stdout")
	root := flag.String("root", "/builds", "the job tree")
	serve := flag.Bool("serve", false, "internal: the server under the init")
	wait := flag.String("wait-tcp", "", "wait until each of these comma-separated host:port addresses accepts a connection, then exit 0; print those that did not and exit 1 after -wait")
	waitFor := flag.Duration("wait", 30*time.Second, "how long -wait-tcp waits")
	relayTo := flag.String("relay", "", "on the node: join stdin/stdout to this Unix socket (QEMU's guestfwd command)")
	flag.Parse()
	if *relayTo != "" {
		if err := relay(*relayTo); err != nil {
			fmt.Fprintln(os.Stderr, "vk-agent:", err)
			os.Exit(1)
		}
		return
	}
	if *wait != "" {
		if pending := waitTCP(strings.Split(*wait, ","), *waitFor); len(pending) > 0 {
			fmt.Println(strings.Join(pending, " "))
			os.Exit(1)
		}
		return
	}
	if os.Getpid() == 1 && !*serve {
		os.Exit(initMain())
	}
	if err := run(*vsock, *port, *stdio, *root); err != nil {
		fmt.Fprintln(os.Stderr, "vk-agent:", err)
		os.Exit(1)
	}
}

func run(vsock uint, port string, stdio bool, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	conn, err := open(vsock, port, stdio)
	if err != nil {
		return err
	}
	defer conn.Close()
	return vmproto.Serve(conn, vmproto.AgentConfig{Root: root, TempDir: filepath.Join(os.TempDir())})
}

type stdioConn struct{}

func (stdioConn) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdioConn) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdioConn) Close() error                { return os.Stdout.Close() }

func open(vsock uint, port string, stdio bool) (io.ReadWriteCloser, error) {
	switch {
	case stdio:
		return stdioConn{}, nil
	case vsock != 0:
		return acceptVsock(uint32(vsock))
	default:
		return openPort(port)
	}
}

// openPort opens the virtio-serial port. Without udev there is no
// /dev/virtio-ports/<name> link: the port is found by its name under
// /sys/class/virtio-ports, waiting up to portWait for the driver, and
// then for the host's side ([waitHost]).
func openPort(port string) (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(portWait)
	for {
		if f, err := os.OpenFile(port, os.O_RDWR, 0); err == nil {
			return waitHost(f, deadline)
		}
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			name, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(name)) == filepath.Base(port) {
				if f, err := os.OpenFile(filepath.Join("/dev", e.Name()), os.O_RDWR, 0); err == nil {
					return waitHost(f, deadline)
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("virtio-serial port %s: not found", port)
		}
		time.Sleep(20 * time.Millisecond) // polling sysfs for a device to appear
	}
}

// waitHost returns f, the opened port, once the host's side is open. A
// virtio console port reads as end of file while the guest has not yet
// been told the host is connected (QEMU's notice of the node's
// connection can arrive after the port's device): the hello would read
// EOF and the agent quit. poll(2) flags such a port POLLHUP; the agent
// waits, up to deadline, until it is not — when the hello's bytes are
// there, or a read would block waiting for them.
func waitHost(f *os.File, deadline time.Time) (*os.File, error) {
	rc, err := f.SyscallConn() // not f.Fd(): that would make the port blocking
	if err != nil {
		f.Close()
		return nil, err
	}
	for {
		var revents int16
		cerr := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, err = unix.Poll(fds, 100)
			revents = fds[0].Revents
		})
		if cerr != nil {
			err = cerr
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			f.Close()
			return nil, fmt.Errorf("virtio-serial port %s: poll: %w", f.Name(), err)
		case revents&unix.POLLHUP == 0:
			// The hello is there, or a read waits for it (poll timed
			// out): the host's side is open.
			return f, nil
		case time.Now().After(deadline):
			f.Close()
			return nil, fmt.Errorf("virtio-serial port %s: the host side never opened", f.Name())
		}
		time.Sleep(10 * time.Millisecond) // POLLHUP does not wait: poll again shortly
	}
}

// portWait bounds the wait for the virtio-serial port to appear.
const portWait = 10 * time.Second

// loadModules loads the kernel modules listed, one path a line, in
// modulesList: the guest kernel's virtio drivers are modules, and no
// modprobe runs before the agent.
func loadModules(list string) {
	b, err := os.ReadFile(list)
	if err != nil {
		return
	}
	for _, m := range strings.Fields(string(b)) {
		f, err := os.Open(m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vk-agent: module %s: %v\n", m, err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			fmt.Fprintf(os.Stderr, "vk-agent: module %s: %v\n", m, err)
		}
		f.Close()
	}
}

// modulesList names the modules the init loads, in order.
const modulesList = "/etc/vk-agent/modules"

// acceptVsock listens on the guest's vsock port and returns the first
// connection (the node's).
func acceptVsock(port uint32) (io.ReadWriteCloser, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		return nil, fmt.Errorf("vsock bind %d: %w", port, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		return nil, fmt.Errorf("vsock listen: %w", err)
	}
	nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vsock accept: %w", err)
	}
	return os.NewFile(uintptr(nfd), "vsock"), nil
}

// initMain is PID 1: it prepares the guest's file systems, starts the
// server as its child and reaps until the server is gone, then powers
// off. The server cannot be PID 1 itself: reaping every child would steal
// the exit statuses the server waits for.
func initMain() int {
	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"}, {"tmpfs", "/tmp", "tmpfs"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			fmt.Fprintf(os.Stderr, "vk-agent: mount %s: %v\n", m.dir, err)
		}
	}
	_ = os.MkdirAll("/dev/pts", 0o755)
	_ = unix.Mount("devpts", "/dev/pts", "devpts", 0, "")
	vmproto.ProtectFromOOM() // the server inherits it; its scripts do not
	loadModules(modulesList)
	cmdline, _ := os.ReadFile("/proc/cmdline")
	gnet, err := parseNet(string(cmdline))
	if err != nil {
		fmt.Fprintln(os.Stderr, "vk-agent:", err)
	}
	if len(gnet.ifs) > 0 {
		loadModules(netModulesList) // from the initramfs, before the root moves
	}
	_ = os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	if dev := rootDevice(); dev != "" {
		if self, err = switchRoot(dev); err != nil {
			fmt.Fprintln(os.Stderr, "vk-agent: the image's root:", err)
			poweroff()
			return 1
		}
	}
	gnet.setup()
	cmd := osexec.Command(self, append([]string{"-serve"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-agent:", err)
		poweroff()
		return 1
	}
	// Through the kernel log, so the console line carries the kernel's
	// time since boot (the node's boot breakdown reads it).
	if k, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		fmt.Fprintln(k, "<4>vk-agent: init ready") // warning: shown at loglevel 5
		k.Close()
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			break // no children left
		}
		if pid == cmd.Process.Pid {
			break
		}
	}
	poweroff()
	return 0
}

func poweroff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}
