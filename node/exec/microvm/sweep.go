package microvm

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidFile is where QEMU writes its process ID in a job's directory.
const pidFile = "qemu.pid"

// sweepWait bounds how long a leftover QEMU gets to die after SIGKILL.
const sweepWait = 10 * time.Second

// Sweep removes what jobs left under root when their executor died
// without cleaning up (the node killed, the host crashed): every job
// directory — its agent socket, console log and disk overlay — after
// killing the QEMU whose pid file it holds, when that process still runs
// with the directory on its command line (a recycled pid is left alone).
// The shared initramfs and the images' disks stay. [New] sweeps its root
// before the first job, when nothing there can be in use.
func Sweep(root string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.Name() == "initrd.cpio" || e.Name() == disksDir {
			continue
		}
		dir := filepath.Join(root, e.Name())
		dirs := []string{dir}
		if sub, _ := filepath.Glob(filepath.Join(dir, "*", pidFile)); len(sub) > 0 { // the KVM probe's
			for _, s := range sub {
				dirs = append(dirs, filepath.Dir(s))
			}
		}
		for _, d := range dirs {
			if pid := leftoverQEMU(d); pid > 0 {
				log.Info("killing a microVM left by a previous run", "pid", pid, "dir", d)
				if err := killGroup(pid); err != nil {
					errs = append(errs, err)
				}
			}
		}
		log.Info("removing a microVM job directory left by a previous run", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leftoverQEMU is the pid in dir's pid file when that process runs with
// dir on its command line, else 0.
func leftoverQEMU(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
		return 0
	}
	return pid
}

// killGroup kills pid's process group (QEMU leads its own) and waits for
// pid to be gone.
func killGroup(pid int) error {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(sweepWait)
	for {
		// A leftover is not our child: its exit shows as its /proc entry
		// going (or turning zombie under its own reaper).
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || zombie(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("microvm: leftover QEMU %d did not die", pid)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for a process that is not our child
	}
}

func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	return i > 0 && len(f) > 0 && f[0] == "Z"
}
