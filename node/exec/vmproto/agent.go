package vmproto

import (
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// AgentConfig configures [Serve], the guest side.
type AgentConfig struct {
	// Root is the job tree: archive and extract paths are inside it, and
	// a script without a Dir runs there. Required.
	Root string
	// TempDir holds the scripts' files; "" means os.TempDir().
	TempDir string
	// DrainWait bounds the wait for a script's output pipes to close once
	// the script and its process group are gone; 0 means 5 s.
	DrainWait time.Duration
}

// agent is one served connection.
type agent struct {
	cfg AgentConfig
	w   *wire

	mu    sync.Mutex
	procs map[uint32]*osexec.Cmd    // running scripts by stream
	ins   map[uint32]*io.PipeWriter // extract streams being fed
	wg    sync.WaitGroup
}

// Serve speaks the protocol on conn as the guest agent until the host
// closes it, then kills every script still running and returns. It
// answers the host's hello first: a host that asks for another version is
// told so and Serve returns an error wrapping [ErrVersion].
func Serve(conn io.ReadWriter, cfg AgentConfig) error {
	if cfg.Root == "" {
		return errors.New("vmproto: AgentConfig.Root is required")
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.DrainWait == 0 {
		cfg.DrainWait = 5 * time.Second
	}
	a := &agent{cfg: cfg, w: &wire{w: conn}, procs: map[uint32]*osexec.Cmd{}, ins: map[uint32]*io.PipeWriter{}}
	f, err := ReadFrame(conn)
	if err != nil {
		return fmt.Errorf("vmproto: hello: %w", err)
	}
	msg, err := Decode(f)
	h, ok := msg.(*Hello)
	if err != nil || !ok {
		return fmt.Errorf("%w: the first frame is %s, not hello", ErrFrame, f.Kind)
	}
	if h.Version != Version {
		_ = a.w.send(Control(KindHello, 0, Hello{Version: Version, Error: fmt.Sprintf("agent speaks version %d, host asked for %d", Version, h.Version)}))
		return fmt.Errorf("%w: host asked for %d", ErrVersion, h.Version)
	}
	if err := a.w.send(Control(KindHello, 0, Hello{Version: Version})); err != nil {
		return err
	}
	defer a.shutdown()
	for {
		f, err := ReadFrame(conn)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := a.handle(f); err != nil {
			return err
		}
	}
}

func (a *agent) handle(f Frame) error {
	msg, err := Decode(f)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *Run:
		a.startRun(f.Stream, m)
	case *Signal:
		a.mu.Lock()
		cmd := a.procs[f.Stream]
		a.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.Signal(m.Number))
		}
	case *PathRequest:
		if f.Kind == KindArchive {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				err := archive(a.cfg.Root, m.Path, m.Only, streamWriter{a.w, KindData, f.Stream})
				_ = a.w.send(Control(KindEnd, f.Stream, End{Error: errString(err)}))
			}()
			return nil
		}
		pr, pw := io.Pipe()
		a.mu.Lock()
		a.ins[f.Stream] = pw
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			err := extract(a.cfg.Root, m.Path, pr, owner{m.UID, m.GID})
			_, _ = io.Copy(io.Discard, pr) // let the host finish sending
			_ = a.w.send(Control(KindEnd, f.Stream, End{Error: errString(err)}))
		}()
	case *End:
		if pw := a.takeIn(f.Stream); pw != nil {
			if m.Error != "" {
				pw.CloseWithError(errors.New(m.Error))
			} else {
				pw.Close()
			}
		}
	case nil: // raw
		if f.Kind == KindData {
			a.mu.Lock()
			pw := a.ins[f.Stream]
			a.mu.Unlock()
			if pw != nil {
				_, _ = pw.Write(f.Payload)
			}
		}
	}
	return nil
}

func (a *agent) takeIn(stream uint32) *io.PipeWriter {
	a.mu.Lock()
	defer a.mu.Unlock()
	pw := a.ins[stream]
	delete(a.ins, stream)
	return pw
}

// startRun starts the script in its own process group, pumps its output
// as frames, and sends Exit when it ended. Whatever the script left
// running in its group is killed then: a step ends with its script.
func (a *agent) startRun(stream uint32, r *Run) {
	fail := func(err error) {
		_ = a.w.send(Control(KindExit, stream, Exit{Code: -1, Error: err.Error()}))
	}
	file := filepath.Join(a.cfg.TempDir, "vk-script-"+strconv.FormatUint(uint64(stream), 10)+".sh")
	cmd, err := a.scriptCommand(r, file)
	if err != nil {
		os.Remove(file)
		fail(err)
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		os.Remove(file)
		fail(err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		os.Remove(file)
		outR.Close()
		outW.Close()
		fail(err)
		return
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	ooms := oomKills()
	a.mu.Lock()
	err = cmd.Start()
	if err == nil {
		a.procs[stream] = cmd
	}
	a.mu.Unlock()
	if err == nil {
		unprotect(cmd.Process.Pid)
	}
	outW.Close()
	errW.Close()
	if err != nil {
		os.Remove(file)
		outR.Close()
		errR.Close()
		fail(err)
		return
	}
	pumped := make(chan struct{}, 2)
	pump := func(k Kind, f *os.File) {
		_, _ = io.Copy(streamWriter{a.w, k, stream}, f)
		pumped <- struct{}{}
	}
	go pump(KindStdout, outR)
	go pump(KindStderr, errR)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		werr := cmd.Wait()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t := time.NewTimer(a.cfg.DrainWait)
		for range 2 {
			select {
			case <-pumped:
			case <-t.C:
				// A process outside the group holds a pipe: stop reading.
				outR.Close()
				errR.Close()
				<-pumped
			}
		}
		t.Stop()
		outR.Close()
		errR.Close()
		os.Remove(file)
		a.mu.Lock()
		delete(a.procs, stream)
		a.mu.Unlock()
		ex := Exit{Code: cmd.ProcessState.ExitCode(), OOMKilled: oomKills() > ooms}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Code, ex.Signal = -1, ws.Signal().String()
		} else if werr != nil && ex.Code == -1 {
			ex.Error = werr.Error()
		}
		_ = a.w.send(Control(KindExit, stream, ex))
	}()
}

// shutdown kills every running script and stops feeding extractions, then
// waits for their goroutines.
func (a *agent) shutdown() {
	a.mu.Lock()
	for _, cmd := range a.procs {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	for id, pw := range a.ins {
		pw.CloseWithError(ErrClosed)
		delete(a.ins, id)
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
