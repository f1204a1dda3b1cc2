package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vk-ci/vk/node/exec/imageuser"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/proto/job"
)

// service is one running service container. Its `runc run` runs in the
// foreground as the node's child, so the service's exit is seen at once.
type service struct {
	name    string // image name as the job gave it
	cid     string
	logPath string
	ports   []int
	done    chan struct{} // closed when the service's runc exits
	code    int           // exit code; valid after done
}

// startService builds the service's rootfs and bundle and starts it in
// the job's network namespace.
func (j *Job) startService(i int, s job.Image, img *imagestore.Image, baseEnv []string, binds []bindMount) error {
	dir := filepath.Join(j.dir, "svc-"+strconv.Itoa(i))
	rfs, err := makeRootfs(dir, img.Rootfs, j.e.cfg.NoOverlay)
	if err != nil {
		return err
	}
	j.rootfs = append(j.rootfs, rfs)
	userSpec := img.Config.User
	if s.User != "" {
		userSpec = s.User
	}
	u, err := imageuser.Resolve(rfs.merged, userSpec)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	env := containerEnv(append(append(append([]string(nil), img.Config.Env...), baseEnv...), job.Environ(s.Variables)...), u.Home)
	entry, cmd := img.Config.Entrypoint, img.Config.Cmd
	if s.Entrypoint != nil {
		entry = clearEmpty(s.Entrypoint)
	}
	if len(s.Command) > 0 {
		cmd = s.Command
	}
	args := append(append([]string(nil), entry...), cmd...)
	if len(args) == 0 {
		return fmt.Errorf("image %s has no command and the job gives none", s.Name)
	}
	cid := j.id + "-svc" + strconv.Itoa(i)
	cs := containerSpec{
		Rootfs:     rfs.merged,
		Hostname:   hostname(j.id),
		Args:       args,
		Env:        env,
		Cwd:        img.Config.WorkingDir,
		UID:        u.UID,
		GID:        u.GID,
		Groups:     u.Groups,
		CgroupPath: j.cg.rel() + "/svc-" + strconv.Itoa(i),
		NetNSPath:  fmt.Sprintf("/proc/%d/ns/net", j.initPID),
		Binds:      binds,
	}
	if err := writeBundle(dir, cs); err != nil {
		return err
	}
	sv := &service{name: s.Name, cid: cid, logPath: filepath.Join(dir, "service.log"), done: make(chan struct{})}
	sv.ports = ServicePorts(s.Ports, img.Config.ExposedPorts)
	logf, err := os.Create(sv.logPath)
	if err != nil {
		return err
	}
	c := j.e.runcCmd("run", "--bundle", dir, cid)
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j.containers = append(j.containers, cid)
	if err := c.Start(); err != nil {
		logf.Close()
		return err
	}
	logf.Close()
	j.services = append(j.services, sv)
	go func() {
		err := c.Wait()
		var ee *osexec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			sv.code = ee.ExitCode()
		default:
			sv.code = -1
		}
		close(sv.done)
	}()
	return nil
}

// waitServices waits until every service listens on its ports (up to
// ServiceWait) or, for a service without ports, watches it for
// ServiceGrace; it returns a warning for each service that exited or never
// listened, worded as gitlab-runner's failed service health check.
func (j *Job) waitServices(ctx context.Context) []string {
	if len(j.services) == 0 {
		return nil
	}
	type result struct {
		sv  *service
		err error
	}
	res := make(chan result, len(j.services))
	for _, sv := range j.services {
		go func() { res <- result{sv, j.waitService(ctx, sv)} }()
	}
	var warns []string
	for range j.services {
		r := <-res
		if r.err != nil {
			warns = append(warns, serviceWarning(r.sv, r.err))
		}
	}
	return warns
}

func (j *Job) waitService(ctx context.Context, sv *service) error {
	clk := j.e.clk
	if len(sv.ports) == 0 {
		t := clk.NewTimer(j.e.cfg.ServiceGrace)
		defer t.Stop()
		select {
		case <-sv.done:
			return fmt.Errorf("service %q exited with code %d", sv.name, sv.code)
		case <-t.C():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	deadline := clk.Now().Add(j.e.cfg.ServiceWait)
	pending := append([]int(nil), sv.ports...)
	for {
		select {
		case <-sv.done:
			return fmt.Errorf("service %q exited with code %d", sv.name, sv.code)
		default:
		}
		var still []int
		for _, p := range pending {
			if !probeInNetns(j.initPID, p) {
				still = append(still, p)
			}
		}
		pending = still
		if len(pending) == 0 {
			return nil
		}
		if !clk.Now().Before(deadline) {
			return fmt.Errorf("service %q timeout: port(s) %v not listening after %s", sv.name, pending, j.e.cfg.ServiceWait)
		}
		// Polling an external process with a deadline.
		t := clk.NewTimer(100 * time.Millisecond)
		select {
		case <-sv.done:
			t.Stop()
			return fmt.Errorf("service %q exited with code %d", sv.name, sv.code)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// probeInNetns reports whether a TCP socket listens on port in the network
// namespace of pid: /proc/<pid>/net/tcp and tcp6 list that namespace's
// sockets, so no thread of the node has to enter the namespace. (An
// earlier version dialled from a locked thread moved into the namespace
// and let the runtime end the thread: every process that thread had
// forked with Pdeathsig, a host job's bash among them, was SIGKILLed.)
func probeInNetns(pid, port int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err == nil && listening(b, port) {
			return true
		}
	}
	return false
}

// tcpListen is the LISTEN state in /proc/net/tcp's st column.
const tcpListen = "0A"

// listening reports whether the /proc/net/tcp{,6} table b has a socket in
// LISTEN on port, on any local address.
func listening(b []byte, port int) bool {
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			return true
		}
	}
	return false
}

// serviceWarning is the trace text for a service that did not start
// properly, in gitlab-runner's words, with the service's last output.
func serviceWarning(sv *service, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*** WARNING: Service %s probably didn't start properly.\n\n", sv.name)
	fmt.Fprintf(&b, "Health check error:\n%s\n\n", strings.TrimSpace(err.Error()))
	fmt.Fprintf(&b, "Service container logs:\n%s\n\n*********\n", tail(sv.logPath, serviceLogLines))
	return b.String()
}

// ServiceFailures reports services that have exited since Prepare, one
// warning each in the same words as Prepare's; nil when all run. The stage
// runner may call it after a failed step to explain it.
func (j *Job) ServiceFailures() []string {
	var out []string
	for _, sv := range j.services {
		select {
		case <-sv.done:
			out = append(out, serviceWarning(sv, fmt.Errorf("service %q exited with code %d", sv.name, sv.code)))
		default:
		}
	}
	return out
}

// ServicePorts are the TCP ports a service is health-checked on, as
// gitlab-runner's docker executor picks them: the ports the job declares
// for it, else the ones its image exposes over TCP ("5432/tcp" or a bare
// "5432"); numbers outside 1..65535 are left out.
func ServicePorts(declared []job.Port, exposed []string) []int {
	var ports []int
	for _, p := range declared {
		if p.Number > 0 && p.Number < 65536 {
			ports = append(ports, p.Number)
		}
	}
	if len(ports) > 0 {
		return ports
	}
	for _, p := range exposed {
		num, proto, _ := strings.Cut(p, "/")
		if n, err := strconv.Atoi(num); err == nil && (proto == "" || proto == "tcp") && n > 0 && n < 65536 {
			ports = append(ports, n)
		}
	}
	return ports
}
