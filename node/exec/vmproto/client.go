package vmproto

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
)

// Client is the host side of one connection to a guest agent. It is safe
// for concurrent use. Frames from the guest are untrusted: a malformed
// one, or one for a stream the host did not open, ends the connection
// (every pending call returns an error wrapping [ErrClosed]).
type Client struct {
	c io.ReadWriteCloser
	w *wire

	mu      sync.Mutex
	next    uint32
	streams map[uint32]*stream
	err     error         // why the connection ended
	done    chan struct{} // closed when the read loop returned
}

// stream is one open request's receiving side.
type stream struct {
	stdout, stderr io.Writer // scripts
	data           io.Writer // archives
	exit           chan Exit // scripts: one Exit
	end            chan End  // archive/extract: one End
	werr           error     // the first error writing data (archive)
}

// Dial speaks the hello on conn and starts reading the guest's frames.
// It fails with an error wrapping [ErrVersion] when the agent speaks
// another version. The Client owns conn from then on.
func Dial(conn io.ReadWriteCloser) (*Client, error) {
	c := &Client{c: conn, w: &wire{w: conn}, streams: map[uint32]*stream{}, done: make(chan struct{})}
	if err := c.w.send(Control(KindHello, 0, Hello{Version: Version})); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vmproto: hello: %w", err)
	}
	f, err := ReadFrame(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("vmproto: hello: %w", err)
	}
	msg, err := Decode(f)
	h, ok := msg.(*Hello)
	if err != nil || !ok {
		conn.Close()
		return nil, fmt.Errorf("%w: the agent's first frame is %s, not hello", ErrFrame, f.Kind)
	}
	if h.Error != "" || h.Version != Version {
		conn.Close()
		return nil, fmt.Errorf("%w: %s", ErrVersion, h.Error)
	}
	go c.readLoop()
	return c, nil
}

// Close ends the connection; the agent kills whatever still runs.
func (c *Client) Close() error {
	err := c.c.Close()
	<-c.done
	return err
}

// Done is closed when the connection ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop() {
	var err error
	for {
		var f Frame
		if f, err = ReadFrame(c.c); err != nil {
			break
		}
		if err = c.dispatch(f); err != nil {
			break
		}
	}
	c.c.Close()
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %w", ErrClosed, err)
	c.streams = map[uint32]*stream{}
	c.mu.Unlock()
	close(c.done)
}

func (c *Client) dispatch(f Frame) error {
	c.mu.Lock()
	s := c.streams[f.Stream]
	c.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: %s frame for stream %d, which is not open", ErrFrame, f.Kind, f.Stream)
	}
	msg, err := Decode(f)
	if err != nil {
		return err
	}
	switch f.Kind {
	case KindStdout, KindStderr:
		w := s.stdout
		if f.Kind == KindStderr {
			w = s.stderr
		}
		if w == nil {
			return fmt.Errorf("%w: output on a stream that runs no script", ErrFrame)
		}
		_, _ = w.Write(f.Payload) // a broken trace must not stop the job
	case KindData:
		if s.data == nil {
			return fmt.Errorf("%w: data on a stream that is not an archive", ErrFrame)
		}
		if s.werr == nil {
			_, s.werr = s.data.Write(f.Payload)
		}
	case KindExit:
		if s.exit == nil {
			return fmt.Errorf("%w: exit on a stream that runs no script", ErrFrame)
		}
		c.close(f.Stream)
		s.exit <- *msg.(*Exit)
	case KindEnd:
		if s.end == nil {
			return fmt.Errorf("%w: end on a script's stream", ErrFrame)
		}
		c.close(f.Stream)
		s.end <- *msg.(*End)
	default:
		return fmt.Errorf("%w: the guest may not send %s", ErrFrame, f.Kind)
	}
	return nil
}

func (c *Client) close(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

// open registers s under a new stream id.
func (c *Client) open(s *stream) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.next++
	if c.next == 0 {
		c.next = 1
	}
	c.streams[c.next] = s
	return c.next, nil
}

// Proc is a script running in the guest.
type Proc struct {
	c    *Client
	id   uint32
	exit chan Exit
}

// Start runs r in the guest, its output written to stdout and stderr as
// it arrives. The writers are called from the Client's reader: a slow
// writer slows every stream of the connection.
func (c *Client) Start(r Run, stdout, stderr io.Writer) (*Proc, error) {
	s := &stream{stdout: stdout, stderr: stderr, exit: make(chan Exit, 1)}
	id, err := c.open(s)
	if err != nil {
		return nil, err
	}
	if err := c.w.send(Control(KindRun, id, r)); err != nil {
		c.close(id)
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return &Proc{c: c, id: id, exit: s.exit}, nil
}

// Signal signals the script's process group in the guest (SIGTERM for a
// graceful cancel, SIGKILL for an immediate one).
func (p *Proc) Signal(sig syscall.Signal) error {
	return p.c.w.send(Control(KindSignal, p.id, Signal{Number: int(sig)}))
}

// Wait returns the script's exit. When ctx ends first the script is
// killed and Wait still returns its exit. It fails with an error wrapping
// [ErrClosed] when the connection ends first.
func (p *Proc) Wait(ctx context.Context) (Exit, error) {
	select {
	case ex := <-p.exit:
		return ex, nil
	case <-ctx.Done():
		_ = p.Signal(syscall.SIGKILL)
	case <-p.c.done:
	}
	select {
	case ex := <-p.exit:
		return ex, nil
	case <-p.c.done:
		select { // an Exit may have raced the end of the connection
		case ex := <-p.exit:
			return ex, nil
		default:
		}
		return Exit{}, p.c.Err()
	}
}

// Archive writes a tar stream of path (relative to the guest's job tree)
// to w, as the agent reads it in the guest. When ctx ends first the
// connection is closed: Archive and Extract are not abandoned half way on
// a connection that goes on.
func (c *Client) Archive(ctx context.Context, path string, w io.Writer) error {
	return c.ArchiveOnly(ctx, path, nil, w)
}

// ArchiveOnly is [Client.Archive] narrowed to the paths only names
// below path and the directories above them ([PathRequest.Only]); nil
// only archives the whole of path.
func (c *Client) ArchiveOnly(ctx context.Context, path string, only []string, w io.Writer) error {
	s := &stream{data: w, end: make(chan End, 1)}
	id, err := c.open(s)
	if err != nil {
		return err
	}
	if err := c.w.send(Control(KindArchive, id, PathRequest{Path: path, Only: only})); err != nil {
		c.close(id)
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	end, err := c.waitEnd(ctx, s)
	if err != nil {
		return err
	}
	if end.Error != "" {
		return fmt.Errorf("vmproto: archive %s: %s", path, end.Error)
	}
	if s.werr != nil {
		return fmt.Errorf("vmproto: archive %s: %w", path, s.werr)
	}
	return nil
}

// Extract sends the tar stream r to be unpacked at path (relative to the
// guest's job tree, created if missing).
func (c *Client) Extract(ctx context.Context, path string, r io.Reader) error {
	return c.ExtractAs(ctx, PathRequest{Path: path}, r)
}

// ExtractAs is [Client.Extract] with the request's owner: what the
// extraction creates is given to req.UID and req.GID.
func (c *Client) ExtractAs(ctx context.Context, req PathRequest, r io.Reader) error {
	path := req.Path
	s := &stream{end: make(chan End, 1)}
	id, err := c.open(s)
	if err != nil {
		return err
	}
	if err := c.w.send(Control(KindExtract, id, req)); err != nil {
		c.close(id)
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	_, cerr := io.Copy(streamWriter{c.w, KindData, id}, r)
	if err := c.w.send(Control(KindEnd, id, End{Error: errString(cerr)})); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	end, err := c.waitEnd(ctx, s)
	if err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("vmproto: extract %s: reading the archive: %w", path, cerr)
	}
	if end.Error != "" {
		return fmt.Errorf("vmproto: extract %s: %s", path, end.Error)
	}
	return nil
}

func (c *Client) waitEnd(ctx context.Context, s *stream) (End, error) {
	select {
	case e := <-s.end:
		return e, nil
	case <-ctx.Done():
		// The guest would go on sending this stream's bytes: the
		// connection is given up instead (the caller is tearing the job
		// down anyway).
		c.c.Close()
		return End{}, ctx.Err()
	case <-c.done:
		select {
		case e := <-s.end:
			return e, nil
		default:
		}
		return End{}, c.Err()
	}
}
