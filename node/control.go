package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/ledger"
)

// The local control socket: `vk node drain|ready|quarantine|status`.
//
// <state_dir>/node.sock is a unix stream socket, mode 0600 (root, or
// whoever runs the agent, only). A client writes one command line and
// reads one JSON line, [ControlStatus], then the agent closes the
// connection.
const (
	// ControlSocket is the socket's name in the state dir.
	ControlSocket = "node.sock"
	// controlTimeout bounds one control exchange.
	controlTimeout = 10 * time.Second
)

// Control commands.
const (
	// CmdStatus reports the state without changing it.
	CmdStatus = "status"
	// CmdDrain refuses new offers and lets held reservations lapse
	// (NODE-05); running jobs finish; the node reports drained once
	// nothing is left. Like SIGUSR1.
	CmdDrain = "drain"
	// CmdReady takes offers again (from draining, drained or
	// quarantined). Like SIGUSR2.
	CmdReady = "ready"
	// CmdQuarantine refuses new offers and releases every held
	// reservation at once, telling the hub (NODE-05); running jobs
	// finish.
	CmdQuarantine = "quarantine"
)

// ErrControl wraps failures of a control exchange: no agent listening, an
// unknown command, a malformed answer.
var ErrControl = errors.New("node: control")

// ControlStatus is the agent's answer to every control command: its state
// after the command.
type ControlStatus struct {
	// State is the node's admission state: ready, draining, drained,
	// quarantined or maintenance.
	State string `json:"state"`
	// Reservations is the number of held reservations.
	Reservations int `json:"reservations"`
	// Jobs is the number of jobs without a result yet (waiting or
	// running).
	Jobs int `json:"jobs"`
	// Unrecorded is the number of jobs whose result the hub has not
	// recorded yet (finished ones included).
	Unrecorded int `json:"unrecorded"`
	// Connected reports whether the hub session is up.
	Connected bool `json:"connected"`
	// Error is set when the command was refused; the state is then the
	// unchanged one.
	Error string `json:"error,omitempty"`
}

// listenPrivate listens on a unix socket at path that only its owner may
// connect to. The socket is bound in a private 0700 directory made under
// dir, set to 0600, then renamed to path: there is no moment in which
// others may connect. A failed chmod or rename closes the listener and is
// returned.
func listenPrivate(dir, path string) (*net.UnixListener, error) {
	tmp, err := os.MkdirTemp(dir, ".ctl-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, filepath.Base(path))
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ul.SetUnlinkOnClose(false)
	err = os.Chmod(bound, 0o600)
	if err == nil {
		err = os.Rename(bound, path)
	}
	if err != nil {
		ul.Close()
		return nil, err
	}
	return ul, nil
}

// serveControl listens on <state_dir>/node.sock until the agent stops. A
// socket file left by a previous agent is replaced; one another running
// agent answers on is an error (two agents on one state dir).
func (a *Agent) serveControl() error {
	path := filepath.Join(a.cfg.Node.StateDir, ControlSocket)
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%w: another agent answers on %s: one agent per state dir", ErrConfig, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node: control socket: %w", err)
	}
	ul, err := listenPrivate(a.cfg.Node.StateDir, path)
	if err != nil {
		return fmt.Errorf("node: control socket: %w", err)
	}
	ln := net.Listener(ul)
	a.ctlLn = ln
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		<-a.runCtx.Done()
		ln.Close()
		os.Remove(path)
	}()
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.bg.Add(1)
			go func() { defer a.bg.Done(); a.serveControlConn(c) }()
		}
	}()
	return nil
}

// closeControl closes the control socket, if open, and removes its file.
func (a *Agent) closeControl() {
	if a.ctlLn != nil {
		a.ctlLn.Close()
		os.Remove(filepath.Join(a.cfg.Node.StateDir, ControlSocket))
	}
}

func (a *Agent) serveControlConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	cmd := strings.TrimSpace(line)
	var st ControlStatus
	switch cmd {
	case CmdStatus:
	case CmdDrain:
		if s := a.State(); s != ledger.StateDraining && s != ledger.StateDrained {
			a.SetState(ledger.StateDraining)
		}
	case CmdReady:
		a.SetState(ledger.StateReady)
	case CmdQuarantine:
		a.SetState(ledger.StateQuarantined)
	default:
		st.Error = fmt.Sprintf("unknown command %q: want status, drain, ready or quarantine", cmd)
	}
	if cmd != CmdStatus && st.Error == "" {
		a.log.Info("operator command on the control socket", "command", cmd)
	}
	s := a.Status()
	s.Error = st.Error
	b, _ := json.Marshal(s)
	if _, err := c.Write(append(b, '\n')); err != nil {
		a.log.Debug("control answer not written", logkey.Err, err)
	}
}

// Status returns the node's state as the control socket reports it.
func (a *Agent) Status() ControlStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.led.Snapshot(a.now())
	return ControlStatus{State: string(s.State), Reservations: len(s.Reservations), Jobs: a.unfinishedLocked(),
		Unrecorded: len(a.jobs), Connected: a.connected}
}

// Control sends cmd (status, drain, ready, quarantine) to the agent
// running on stateDir and returns its answer. An error wraps ErrControl;
// a refused command returns the status with Error set and an error.
func Control(ctx context.Context, stateDir, cmd string) (ControlStatus, error) {
	path := filepath.Join(stateDir, ControlSocket)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return ControlStatus{}, fmt.Errorf("%w: is `vk node run` running on %s? %w", ErrControl, stateDir, err)
	}
	defer c.Close()
	dl := time.Now().Add(controlTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return ControlStatus{}, fmt.Errorf("%w: %w", ErrControl, err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return ControlStatus{}, fmt.Errorf("%w: no answer: %w", ErrControl, err)
	}
	var st ControlStatus
	if err := json.Unmarshal(line, &st); err != nil {
		return ControlStatus{}, fmt.Errorf("%w: answer: %w", ErrControl, err)
	}
	if st.Error != "" {
		return st, fmt.Errorf("%w: %s", ErrControl, st.Error)
	}
	return st, nil
}
