package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/internal/procstat"
)

// Target is the hub a run drives: its URL, the CA to pin, its admin
// socket and, for a hub this run started, its process.
type Target struct {
	URL    string
	CAPEM  []byte
	Socket string
	// Dir is the hub's state directory.
	Dir string
	// PID is the hub's process ID; 0 when the hub was not started here
	// (CPU and memory are then not reported).
	PID  int
	stop func() error
	kill func() error
}

// clientTLS is the hub's URL and a TLS client configuration that pins
// the hub's CA for its host.
func (t *Target) clientTLS() (*url.URL, *tls.Config, error) {
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, nil, err
	}
	tcfg, err := pki.ClientConfig(t.CAPEM, u.Hostname())
	if err != nil {
		return nil, nil, err
	}
	return u, tcfg, nil
}

// Stop ends a hub this run started (SIGTERM, then waits); a no-op for a
// hub given by the operator.
func (t *Target) Stop() error {
	if t.stop == nil {
		return nil
	}
	return t.stop()
}

// Kill ends a hub this run started with SIGKILL and waits for it to
// exit; a no-op for a hub given by the operator.
func (t *Target) Kill() error {
	if t.kill == nil {
		return nil
	}
	return t.kill()
}

// Admin is a client of the hub's admin socket.
func (t *Target) Admin() *admin.Client { return admin.Dial(t.Socket) }

// hubConfig is the configuration a started hub runs with: defaults,
// except for what would throttle a load test rather than the hub.
const hubConfig = `version = 1
addr = "127.0.0.1:0"
state_dir = %q

[approvals]
required = false

[limits]
per_principal = 100000
per_hub = 1000000

[capacity_policy]
probe_limit = 100000
backoff_initial_secs = 1
backoff_max_secs = 2
`

// StartHub starts `cmd... serve --config <dir>/hub.toml --log-format
// json` with its state under dir, and returns once the hub logged its
// listening address and wrote its CA. The hub's log goes to logw (nil
// discards it). extraEnv is added to the child's environment.
func StartHub(ctx context.Context, cmd []string, dir string, extraEnv []string, logw io.Writer) (*Target, error) {
	stateDir := filepath.Join(dir, "hub")
	return startHubConfig(ctx, cmd, dir, stateDir, fmt.Sprintf(hubConfig, stateDir), extraEnv, logw)
}

// startHubConfig is StartHub with the configuration's text given (its
// state_dir is stateDir).
func startHubConfig(ctx context.Context, cmd []string, dir, stateDir, config string, extraEnv []string, logw io.Writer) (*Target, error) {
	if len(cmd) == 0 {
		return nil, errors.New("loadgen: no hub command")
	}
	cfgPath := filepath.Join(dir, "hub.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	args := append(append([]string{}, cmd[1:]...), "serve", "--config", cfgPath, "--log-format", "json")
	c := exec.Command(cmd[0], args...)
	c.Env = append(os.Environ(), extraEnv...)
	stderr, err := c.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("loadgen: start hub %s: %w", cmd[0], err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go scanHubLog(stderr, logw, addr)
	go func() { exited <- c.Wait() }()
	var waited error
	var once sync.Once
	wait := func() error { once.Do(func() { waited = <-exited }); return waited }
	stop := func() error {
		c.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			once.Do(func() { waited = err })
			return err
		case <-time.After(15 * time.Second):
			c.Process.Kill()
			return wait()
		}
	}
	kill := func() error {
		c.Process.Kill()
		wait()
		return nil
	}
	var a string
	select {
	case a = <-addr:
	case err := <-exited:
		return nil, fmt.Errorf("loadgen: hub exited before listening: %v", err)
	case <-time.After(60 * time.Second):
		stop()
		return nil, errors.New("loadgen: hub did not log \"hub listening\" within 60 s")
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	ca, err := os.ReadFile(filepath.Join(stateDir, "pki", pki.CACertFile))
	if err != nil {
		stop()
		return nil, fmt.Errorf("loadgen: hub CA: %w", err)
	}
	return &Target{URL: "https://" + a, CAPEM: ca, Socket: admin.SocketPath(stateDir), Dir: stateDir, PID: c.Process.Pid,
		stop: stop, kill: kill}, nil
}

// scanHubLog copies the hub's JSON log to w and sends the address of
// its "hub listening" line once.
func scanHubLog(r io.Reader, w io.Writer, addr chan<- string) {
	if w == nil {
		w = io.Discard
	}
	sent := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(w, "%s\n", line)
		if sent {
			continue
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "hub listening" && rec.Addr != "" {
			addr <- rec.Addr
			sent = true
		}
	}
	io.Copy(w, r)
}

// readProc reads pid's usage; the zero value when pid is 0 (a hub this
// run did not start) or /proc cannot be read.
func readProc(pid int) procstat.Usage {
	if pid == 0 {
		return procstat.Usage{}
	}
	u, _ := procstat.Read(pid)
	return u
}
