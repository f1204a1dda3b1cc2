package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/oci"
	"github.com/vk-ci/vk/node/exec/vmproto"
	"github.com/vk-ci/vk/proto/job"
)

// Services as VMs (STAGE-07): each of a job's services boots its own VM
// from its image, beside the job's VM and at the same time, and the
// job's VMs share a private network (hub.go) with static addresses:
// 10.0.2.2 the job's, 10.0.2.3 onwards the services' in the job's order
// (10.0.2.1 stays free for a gateway). Every VM's /etc/hosts names each
// service by its alias and its image-derived names, as the oci backend
// names them (oci.ServiceHostnames: one alias per service, DECISIONS 8).
//
// A service's VM runs its main process through its agent as the Docker
// executor runs a service container: the image's entrypoint (or the
// service's entrypoint:) followed by the image's command (or command:),
// as the image's USER (or the service's user), in the image's working
// directory, with the image's environment, then the job's variables,
// then the service's own. Its output goes to a log in its directory.
//
// Prepare then health-checks the services as the oci backend does: a
// service with ports (the job's, else the image's exposed TCP ports) is
// up when the job's VM can connect to each — the job VM's agent dials
// them (vk-agent -wait-tcp), so the check also proves the network —
// within [Config.ServiceWait]; one without ports is watched for
// [Config.ServiceGrace]; a negative ServiceWait skips the check. A
// service that exits or never listens gets a warning in gitlab-runner's
// words ([Job.Warnings]); the job goes on, as gitlab-runner's does. A
// service VM has [Config.ServiceMemMiB] and [Config.ServiceCPUs] beside
// the job's size. Cleanup destroys every VM of the job; the
// leftover sweep finds services' VMs in the job's directory.

// Service defaults.
const (
	// DefaultServiceWait bounds the wait for a service's ports.
	DefaultServiceWait = 30 * time.Second
	// DefaultServiceGrace is the watch of a service without ports.
	DefaultServiceGrace = 500 * time.Millisecond
	// DefaultServiceMemMiB is a service VM's memory, DefaultServiceCPUs
	// its vCPUs.
	DefaultServiceMemMiB = 256
	DefaultServiceCPUs   = 1
	// serviceLogLines is how much of a failed service's output its
	// warning shows.
	serviceLogLines = 20
	// maxServices bounds a job's services: each takes an address of the
	// job's /24.
	maxServices = 200
)

// The job's network addresses.
const (
	netPrefix = "10.0.2."
	jobHost   = 2
	firstSvc  = 3
)

func netAddr(host int) string { return netPrefix + strconv.Itoa(host) }

func netMAC(host int) string { return fmt.Sprintf("52:54:00:76:6b:%02x", host) }

// services are a job's service VMs and the network they share with it.
type services struct {
	hub  *hub
	list []*service
	// booted receives each service's boot result, once per service.
	booted chan bootResult
	stop   context.CancelFunc // ends the boots still under way
	boots  sync.WaitGroup
}

type bootResult struct {
	sv  *service
	err error
}

// service is one service's VM and its main process.
type service struct {
	name    string // the image name as the job gave it
	img     job.Image
	vm      *Job
	ports   []int
	logPath string
	done    chan struct{} // closed when the main process ended
	code    int           // its exit code; valid after done
}

// startServices starts the job's network and boots each service's VM in
// the background, and puts j on the network; [services.ready] waits.
func (e *Executor) startServices(ctx context.Context, j *Job, spec Spec) (*services, error) {
	if len(spec.Services) > maxServices {
		return nil, fmt.Errorf("%w: the job has %d services; the microvm executor runs at most %d", exec.ErrConfiguration, len(spec.Services), maxServices)
	}
	h, err := startHub(filepath.Join(j.dir, "net.sock"), e.log)
	if err != nil {
		return nil, err
	}
	bctx, stop := context.WithCancel(ctx)
	ss := &services{hub: h, booted: make(chan bootResult, len(spec.Services)), stop: stop}
	var hosts []string
	for i, s := range spec.Services {
		names, dropped := oci.ServiceHostnames(s)
		hosts = append(hosts, netAddr(firstSvc+i)+","+strings.Join(names, ","))
		if len(dropped) > 0 {
			j.warnings = append(j.warnings, fmt.Sprintf(
				"WARNING: service %s (#%d) has several aliases; vk uses one per service (the first, %q) and drops: %s",
				s.Name, i, names[0], strings.Join(dropped, ", ")))
		}
	}
	j.net = &vmNet{hub: h.ln.Addr().String(), addr: netAddr(jobHost) + "/24", mac: netMAC(jobHost), hosts: hosts}
	for i, s := range spec.Services {
		dir := filepath.Join(j.dir, "svc-"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			ss.stop()
			return ss, err
		}
		vm := e.newJob(j.id+"-svc"+strconv.Itoa(i), dir, exec.Size{MemMiB: e.cfg.ServiceMemMiB, CPUs: e.cfg.ServiceCPUs})
		vm.net = &vmNet{hub: j.net.hub, addr: netAddr(firstSvc+i) + "/24", mac: netMAC(firstSvc + i), hosts: hosts}
		sv := &service{name: s.Name, img: s, vm: vm, logPath: filepath.Join(dir, "service.log"), done: make(chan struct{})}
		ss.list = append(ss.list, sv)
		ss.boots.Go(func() {
			err := e.bootImage(bctx, vm, s, spec.Credentials)
			if err == nil {
				err = sv.start(spec.ServiceEnv)
			}
			if err != nil {
				err = fmt.Errorf("service %s: %w", s.Name, err)
			}
			ss.booted <- bootResult{sv, err}
		})
	}
	return ss, nil
}

// start runs the service's main process in its VM.
func (sv *service) start(baseEnv []string) error {
	vm, s := sv.vm, sv.img
	cfg := vm.image.Config
	cmd := cfg.Cmd
	if len(s.Command) > 0 {
		cmd = s.Command
	}
	if len(vm.entry)+len(cmd) == 0 {
		return fmt.Errorf("%w: image %s has no command and the job gives none", exec.ErrConfiguration, s.Name)
	}
	env := append(append(append([]string(nil), vm.env...), baseEnv...), job.Environ(s.Variables)...)
	dir := cfg.WorkingDir
	if dir == "" {
		dir = "/"
	}
	sv.ports = oci.ServicePorts(s.Ports, cfg.ExposedPorts)
	logf, err := os.Create(sv.logPath)
	if err != nil {
		return err
	}
	w := &lockedWriter{w: logf}
	p, err := vm.client.Start(vmproto.Run{Entrypoint: vm.entry, Command: cmd, Env: env, Dir: dir,
		UID: vm.user.UID, GID: vm.user.GID, Groups: vm.user.Groups}, w, w)
	if err != nil {
		logf.Close()
		return err
	}
	go func() {
		ex, err := p.Wait(context.Background())
		sv.code = ex.Code
		if err != nil {
			sv.code = -1
		}
		logf.Close()
		close(sv.done)
	}()
	return nil
}

// lockedWriter serialises the service's two streams into one log.
type lockedWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ready waits for every service's VM to boot — a boot that fails fails
// the job's Prepare — then health-checks them from j, the job's VM,
// adding a warning to j for each that exited or never listened.
func (ss *services) ready(ctx context.Context, j *Job) error {
	var errs []error
	for range ss.list {
		select {
		case r := <-ss.booted:
			errs = append(errs, r.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if j.e.cfg.ServiceWait < 0 {
		return ctx.Err() // wait_for_services_timeout = -1: no health check
	}
	warns := make([]string, len(ss.list))
	var wg sync.WaitGroup
	for i, sv := range ss.list {
		wg.Go(func() {
			if err := sv.health(ctx, j); err != nil {
				warns[i] = sv.warning(err)
			}
		})
	}
	wg.Wait()
	for _, w := range warns {
		if w != "" {
			j.warnings = append(j.warnings, w)
		}
	}
	return ctx.Err()
}

// health is the service's health check from the job's VM.
func (sv *service) health(ctx context.Context, j *Job) error {
	e := j.e
	if len(sv.ports) == 0 {
		return sv.healthNoPorts(ctx, e.cfg.ServiceGrace)
	}
	host := netAddr(firstSvc + sv.index(j))
	addrs := make([]string, len(sv.ports))
	for i, p := range sv.ports {
		addrs[i] = host + ":" + strconv.Itoa(p)
	}
	var out strings.Builder
	p, err := j.client.Start(vmproto.Run{Command: []string{j.agentPath(), "-wait-tcp", strings.Join(addrs, ","), "-wait", e.cfg.ServiceWait.String()},
		Env: []string{"PATH=/bin:/usr/bin"}}, &out, &out)
	if err != nil {
		return err
	}
	checked := make(chan error, 1)
	go func() {
		ex, err := p.Wait(ctx)
		switch {
		case err != nil:
			checked <- err
		case ex.Error != "":
			checked <- errors.New(ex.Error)
		case ex.Code != 0:
			checked <- fmt.Errorf("service %q timeout: port(s) %v not listening after %s", sv.name, sv.pending(out.String()), e.cfg.ServiceWait)
		default:
			checked <- nil
		}
	}()
	select {
	case err := <-checked:
		return err
	case <-sv.done:
		_ = p.Signal(syscall.SIGKILL)
		<-checked
		return sv.exited()
	}
}

func (sv *service) exited() error {
	return fmt.Errorf("service %q exited with code %d", sv.name, sv.code)
}

// healthNoPorts watches a service without ports for grace: it is up
// unless it exits in that time.
func (sv *service) healthNoPorts(ctx context.Context, grace time.Duration) error {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-sv.done:
		return sv.exited()
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pending are the ports the health check printed as not listening.
func (sv *service) pending(out string) []int {
	var ports []int
	for _, a := range strings.Fields(out) {
		if i := strings.LastIndexByte(a, ':'); i >= 0 {
			if n, err := strconv.Atoi(a[i+1:]); err == nil {
				ports = append(ports, n)
			}
		}
	}
	if len(ports) == 0 {
		return sv.ports
	}
	return ports
}

func (sv *service) index(j *Job) int {
	for i, s := range j.svcs.list {
		if s == sv {
			return i
		}
	}
	return -1
}

// warning is the trace text for a service that did not start properly,
// in gitlab-runner's words (as the oci backend writes it), with the
// service's last output.
func (sv *service) warning(err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*** WARNING: Service %s probably didn't start properly.\n\n", sv.name)
	fmt.Fprintf(&b, "Health check error:\n%s\n\n", strings.TrimSpace(err.Error()))
	fmt.Fprintf(&b, "Service container logs:\n%s\n\n*********\n", tailLines(sv.logPath, serviceLogLines))
	return b.String()
}

func tailLines(p string, n int) string {
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanup destroys every service VM and stops the network.
func (ss *services) cleanup(ctx context.Context) error {
	ss.stop()
	ss.boots.Wait()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sv := range ss.list {
		wg.Go(func() {
			if err := sv.vm.Cleanup(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ss.hub.close()
	return errors.Join(errs...)
}

// Warnings are the trace's warnings from Prepare: services that did not
// start properly, aliases dropped.
func (j *Job) Warnings() []string { return append([]string(nil), j.warnings...) }

// ServiceFailures reports services that have exited since Prepare, one
// warning each in the same words as Prepare's; nil when all run.
func (j *Job) ServiceFailures() []string {
	if j.svcs == nil {
		return nil
	}
	var out []string
	for _, sv := range j.svcs.list {
		select {
		case <-sv.done:
			out = append(out, sv.warning(sv.exited()))
		default:
		}
	}
	return out
}
