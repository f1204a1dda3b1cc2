package microvm

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vk-ci/vk/node/exec/vmproto"
)

// Boot is the breakdown of one job's start.
type Boot struct {
	// QEMU is Prepare's start to the agent's socket accepting (QEMU up).
	QEMU time.Duration
	// Kernel is the guest kernel's own time from boot to starting the
	// agent as init, as its log stamps it.
	Kernel time.Duration
	// Ready is Prepare's start to the agent's hello: the guest can run a
	// stage.
	Ready time.Duration
}

// kernelArgs is the guest's command line: the console on the one serial
// port, power off on panic, and no probing of what a microvm lacks (PCI,
// the i8042 keyboard controller) or of the TSC and delay loop, which
// under emulation costs seconds.
const kernelArgs = "console=ttyS0 panic=-1 loglevel=5 lpj=2000000 tsc=reliable no_timer_check pci=off i8042.noaux i8042.nokbd i8042.nopnp"

// tcgKernelArgs gives the guest under TCG its TSC's frequency. With
// -icount (below) the emulated TSC counts the guest's virtual
// nanoseconds: 1 GHz exactly. Left to measure it against the PIT, the
// kernel's calibration fails when the host deschedules the vCPU thread
// mid-measurement (a loaded host, two guests booting at once): it logs
// "tsc: Unable to calibrate against PIT", and such a guest was seen
// making no progress for the whole 10-minute boot timeout.
const tcgKernelArgs = " tsc_early_khz=1000000"

var idRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// vmNet is a VM's place on its job's network (hub.go).
type vmNet struct {
	hub   string   // the hub's socket
	addr  string   // the guest's IPv4 address, with its prefix
	mac   string   // the guest's Ethernet address
	hosts []string // vk.host= values: "<ip>,<name>,<name>…"
}

// qemuArgs is QEMU's command line for a guest of mem MiB and cpus vCPUs
// whose agent listens on sock, with disk (a qcow2 overlay) as its root
// when not "", on the job's network when nw is not nil, with the
// forwarding network of net.mode "switch" when fwd is not nil.
func (e *Executor) qemuArgs(dir, sock string, mem int64, cpus int, disk string, nw *vmNet, fwd *forwarder) []string {
	appendArgs := kernelArgs
	if e.cfg.Accel == AccelTCG {
		appendArgs += tcgKernelArgs
	}
	if disk != "" {
		appendArgs += " vk.root=/dev/vda"
	}
	if nw != nil {
		appendArgs += " vk.net=" + nw.addr + "@" + nw.mac
		for _, h := range nw.hosts {
			appendArgs += " vk.host=" + h
		}
	}
	if fwd != nil {
		appendArgs += fwd.kernelArgs()
	}
	args := []string{
		"-M", "microvm", "-accel", e.cfg.Accel, "-m", strconv.Itoa(int(mem)), "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", e.cfg.Kernel, "-initrd", e.initrd,
		"-append", appendArgs,
		"-pidfile", filepath.Join(dir, pidFile),
		"-serial", "file:" + filepath.Join(dir, "console.log"),
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=vk.agent",
	}
	if disk != "" {
		args = append(args, "-drive", "id=root,file="+disk+",format=qcow2,if=none,discard=unmap",
			"-device", "virtio-blk-device,drive=root")
	}
	if nw != nil {
		args = append(args, "-netdev", "stream,id=net,server=off,addr.type=unix,addr.path="+nw.hub,
			"-device", "virtio-net-device,netdev=net,mac="+nw.mac)
	}
	if fwd != nil {
		args = append(args, fwd.qemuArgs(e.cfg.Agent)...)
	}
	if e.cfg.Accel == AccelTCG {
		// The guest's clock follows the instructions it ran, not the
		// host's: on a loaded host an emulated vCPU that gets little CPU
		// otherwise spends it all on the timer interrupts it fell behind
		// on, and never boots.
		args = append(args, "-icount", "shift=auto,sleep=on")
	}
	return args
}

// boot starts QEMU for j and waits for its agent's hello.
func (e *Executor) boot(ctx context.Context, j *Job, disk string) error {
	mem, cpus := j.size.MemMiB, j.size.CPUs
	if mem <= 0 {
		mem = DefaultMemMiB
	}
	if cpus <= 0 {
		cpus = 1
	}
	sock := filepath.Join(j.dir, "agent.sock")
	cmd := osexec.Command(e.qemu, e.qemuArgs(j.dir, sock, mem, cpus, disk, j.net, j.fwd)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	qlog, err := os.Create(filepath.Join(j.dir, "qemu.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = qlog, qlog
	err = cmd.Start()
	qlog.Close()
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	j.cmd = cmd
	go func() { _ = cmd.Wait(); close(j.exited) }()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.BootTimeout)
	defer cancel()
	console := func() string { return tailFile(filepath.Join(j.dir, "console.log"), 5) }
	var conn net.Conn
	for conn == nil {
		c, err := net.Dial("unix", sock)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-j.exited:
			return fmt.Errorf("qemu exited: %s", tailFile(filepath.Join(j.dir, "qemu.log"), 5))
		case <-ctx.Done():
			return fmt.Errorf("qemu's agent socket did not appear within %v", e.cfg.BootTimeout)
		case <-time.After(5 * time.Millisecond): // polling a socket QEMU creates
		}
	}
	j.boot.QEMU = time.Since(j.start)
	dialed := make(chan error, 1)
	go func() {
		c, err := vmproto.Dial(conn)
		j.client = c
		dialed <- err
	}()
	select {
	case err := <-dialed:
		if err != nil {
			return fmt.Errorf("agent: %w; console: %s", err, console())
		}
	case <-j.exited:
		conn.Close()
		<-dialed
		return fmt.Errorf("the guest stopped before its agent was ready; console: %s", console())
	case <-ctx.Done():
		conn.Close()
		<-dialed
		return fmt.Errorf("the guest's agent was not ready within %v (accel %s); console: %s", e.cfg.BootTimeout, e.cfg.Accel, console())
	}
	j.boot.Ready = time.Since(j.start)
	j.boot.Kernel = kernelTime(filepath.Join(j.dir, "console.log"))
	return nil
}

var readyRe = regexp.MustCompile(`\[\s*(\d+\.\d+)\] vk-agent: init ready`)

// kernelTime reads the kernel's stamp of the agent's ready line.
func kernelTime(console string) time.Duration {
	b, _ := os.ReadFile(console)
	m := readyRe.FindSubmatch(b)
	if m == nil {
		return 0
	}
	s, _ := strconv.ParseFloat(string(m[1]), 64)
	return time.Duration(s * float64(time.Second))
}

func tailFile(p string, n int) string {
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
