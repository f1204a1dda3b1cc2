package reqsign

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Pool defaults.
const (
	// DefaultMaxIdle is how many idle connections a [Pool] keeps per host.
	DefaultMaxIdle = 16
	// DefaultIdleTimeout is how long a [Pool] keeps a connection idle
	// before closing it: well under the hub's own idle timeout, so the
	// client, not the hub, normally ends an idle connection.
	DefaultIdleTimeout = 30 * time.Second
)

// Pool is an [http.RoundTripper] that keeps its TLS connections open and
// sends many requests, one after another, on each (AUTH-14 as vk reads
// it: docs/security.md). Before writing a request on a connection it signs
// it afresh over that connection's exporter with the connection's next
// sequence number (message v2, vk-seq), so the signature is good on that
// connection only and there only once. It writes the request, reads the
// answer, and once the answer's body has been read to its end (or the
// answer has none) the connection goes back to the pool for the next
// request; an answer with "Connection: close", a body closed before its
// end, a cancelled request or any error closes it instead.
//
// Idle connections: at most MaxIdle per host, each closed after
// IdleTimeout idle or as soon as the hub closes it (a reader watches each
// idle connection). A request never waits for a connection: it takes an
// idle one or dials a new one, so the connections open are the caller's
// in-flight requests plus at most MaxIdle idle ones.
//
// A request that fails on a reused connection before any of the answer
// arrived (the hub closed the connection as it was being taken) is sent
// again, once, on a new connection with a new signature when nothing of
// it can have been acted on: its write failed, or it is a GET, HEAD or
// OPTIONS. Any other failure is returned, for the caller's retry rules.
//
// HTTP/1.1 only; a 101 (protocol switch) answer is refused: WebSocket
// upgrades own their connection and use [Transport]. The request body is
// read into memory to hash it. The zero value is not usable: Key,
// Principal and TLSConfig are required. Safe for concurrent use.
type Pool struct {
	// Key signs requests.
	Key ed25519.PrivateKey
	// Principal is the signer's ID, sent in vk-relay.
	Principal string
	// TLSConfig configures the client side of each connection, as for
	// [Transport]; a ClientSessionCache makes new connections resume.
	TLSConfig *tls.Config
	// Dialer dials TCP; nil means a net.Dialer with a 30 s timeout.
	Dialer *net.Dialer
	// Now returns the signing time; nil means time.Now.
	Now func() time.Time
	// ResponseHeaderTimeout bounds the wait for response headers; zero
	// means no limit beyond the request's context.
	ResponseHeaderTimeout time.Duration
	// MaxIdle bounds the idle connections kept per host; 0 means
	// [DefaultMaxIdle], negative keeps none.
	MaxIdle int
	// IdleTimeout closes a connection idle this long; 0 means
	// [DefaultIdleTimeout].
	IdleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*poolConn // by host:port, oldest first
}

// poolConn is one kept-alive connection.
type poolConn struct {
	conn *tls.Conn
	cr   *countReader // under br: counts the answer bytes read
	br   *bufio.Reader
	bw   *bufio.Writer
	ekm  []byte
	addr string
	seq  uint64 // the sequence number of the last request signed on it

	// While idle: watch ends (closing watchDone) when the hub closes the
	// connection, sends bytes unasked, the idle timeout passes, or a
	// request takes the connection (taken, under Pool.mu).
	taken     bool
	watchDone chan struct{}
	watchErr  error
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// aLongTimeAgo is a deadline in the past: it makes pending reads return.
var aLongTimeAgo = time.Unix(1, 0)

// CloseIdleConnections closes the idle connections; later requests dial
// new ones. http.Client.CloseIdleConnections calls it.
func (p *Pool) CloseIdleConnections() {
	p.mu.Lock()
	all := p.idle
	p.idle = nil
	for _, list := range all {
		for _, pc := range list {
			pc.taken = true
		}
	}
	p.mu.Unlock()
	for _, list := range all {
		for _, pc := range list {
			pc.conn.Close()
		}
	}
}

// RoundTrip implements [http.RoundTripper].
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		closeBody(req)
		return nil, fmt.Errorf("reqsign: refusing to sign a %q request: need https", req.URL.Scheme)
	}
	if p.TLSConfig == nil || p.Key == nil || p.Principal == "" {
		closeBody(req)
		return nil, errors.New("reqsign: Pool needs Key, Principal and TLSConfig")
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reqsign: read body: %w", err)
		}
		body = b
	}
	addr := hostPort(req.URL.Hostname(), req.URL.Port())
	fresh := false
	for {
		pc, reused, err := p.get(req.Context(), addr, req.URL.Hostname(), fresh)
		if err != nil {
			return nil, err
		}
		resp, retry, err := p.send(pc, req, body)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		if !reused || !retry || req.Context().Err() != nil {
			return nil, err
		}
		fresh = true
	}
}

func hostPort(host, port string) string {
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(host, port)
}

// get returns an idle connection to addr that is still good, or a new
// one (always a new one when fresh); reused tells which.
func (p *Pool) get(ctx context.Context, addr, host string, fresh bool) (pc *poolConn, reused bool, err error) {
	for !fresh {
		p.mu.Lock()
		list := p.idle[addr]
		if len(list) == 0 {
			p.mu.Unlock()
			break
		}
		pc = list[len(list)-1]
		p.idle[addr] = list[:len(list)-1]
		pc.taken = true
		p.mu.Unlock()
		// Stop the idle reader; the connection is good if it only timed
		// out, with nothing read.
		pc.conn.SetReadDeadline(aLongTimeAgo)
		<-pc.watchDone
		if errors.Is(pc.watchErr, os.ErrDeadlineExceeded) && pc.br.Buffered() == 0 {
			pc.conn.SetReadDeadline(time.Time{})
			return pc, true, nil
		}
		pc.conn.Close()
	}
	c, err := dialTLS(ctx, p.TLSConfig, p.Dialer, addr, host, addr)
	if err != nil {
		return nil, false, err
	}
	cs := c.ConnectionState()
	ekm, err := Exporter(&cs)
	if err != nil {
		c.Close()
		return nil, false, err
	}
	pc = &poolConn{conn: c, cr: &countReader{r: c}, bw: bufio.NewWriter(c), ekm: ekm, addr: addr}
	pc.br = bufio.NewReader(pc.cr)
	return pc, false, nil
}

// send signs req for pc's next sequence number, writes it on pc and reads
// the answer's headers. On an error, retry reports whether nothing of the
// request can have been acted on: its write failed, or no byte of the
// answer arrived and the method is safe to repeat.
func (p *Pool) send(pc *poolConn, req *http.Request, body []byte) (resp *http.Response, retry bool, err error) {
	ctx := req.Context()
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	ts := now()
	seq := pc.seq + 1
	out := req.Clone(ctx)
	out.Body, out.ContentLength, out.GetBody = nil, 0, nil
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
	}
	out.Header.Del(HeaderPrincipal)
	out.Header.Del(HeaderTime)
	out.Header.Del(HeaderSignature)
	SetHeadersSeq(out.Header, p.Principal, ts, seq, SignSeq(p.Key, p.Principal, out.Method, out.URL.RequestURI(), body, ts, seq, pc.ekm))
	pc.seq = seq

	// A cancelled request ends its connection's reads and writes.
	stop := context.AfterFunc(ctx, func() { pc.conn.SetDeadline(aLongTimeAgo) })
	if err := out.Write(pc.bw); err != nil {
		stop()
		return nil, true, fmt.Errorf("reqsign: write request: %w", err)
	}
	if err := pc.bw.Flush(); err != nil {
		stop()
		return nil, true, fmt.Errorf("reqsign: write request: %w", err)
	}
	var hdrTimer *time.Timer
	if p.ResponseHeaderTimeout > 0 {
		hdrTimer = time.AfterFunc(p.ResponseHeaderTimeout, func() { pc.conn.SetReadDeadline(aLongTimeAgo) })
	}
	before := pc.cr.n
	resp, err = http.ReadResponse(pc.br, out)
	if hdrTimer != nil && !hdrTimer.Stop() && err == nil {
		err = errors.New("reqsign: timeout awaiting response headers")
		resp.Body.Close()
	}
	if err != nil {
		stop()
		safe := out.Method == http.MethodGet || out.Method == http.MethodHead || out.Method == http.MethodOptions
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return nil, safe && pc.cr.n == before, fmt.Errorf("reqsign: read answer: %w", err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stop()
		resp.Body.Close()
		return nil, false, errors.New("reqsign: Pool does not switch protocols; upgrade with Transport")
	}
	b := &poolBody{p: p, pc: pc, rc: resp.Body, stop: stop, keep: !resp.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, false, nil
	}
	resp.Body = b
	return resp, false, nil
}

// poolBody is an answer's body; reading it to its end hands the
// connection back to the pool, closing it earlier closes the connection.
type poolBody struct {
	p    *Pool
	pc   *poolConn
	rc   io.ReadCloser
	stop func() bool
	keep bool // the hub did not ask to close
	once sync.Once
}

func (b *poolBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *poolBody) Close() error {
	b.finish(false)
	return nil
}

// finish ends the request on its connection once: the connection goes
// back to the pool when atEnd (the whole answer read), the hub did not
// ask to close, and the request was not cancelled; else it is closed.
func (b *poolBody) finish(atEnd bool) {
	b.once.Do(func() {
		live := b.stop()
		if atEnd && b.keep && live {
			b.p.put(b.pc)
			return
		}
		b.pc.conn.Close()
	})
}

// put makes pc idle: a reader watches it until a request takes it, the
// hub closes it, or it has been idle for the idle timeout.
func (p *Pool) put(pc *poolConn) {
	maxIdle := p.MaxIdle
	if maxIdle == 0 {
		maxIdle = DefaultMaxIdle
	}
	idleFor := p.IdleTimeout
	if idleFor <= 0 {
		idleFor = DefaultIdleTimeout
	}
	if maxIdle < 0 || pc.br.Buffered() > 0 {
		pc.conn.Close()
		return
	}
	pc.taken, pc.watchErr, pc.watchDone = false, nil, make(chan struct{})
	pc.conn.SetReadDeadline(time.Now().Add(idleFor))
	var evicted *poolConn
	p.mu.Lock()
	if p.idle == nil {
		p.idle = map[string][]*poolConn{}
	}
	list := append(p.idle[pc.addr], pc)
	if len(list) > maxIdle {
		evicted = list[0]
		evicted.taken = true
		list = list[1:]
	}
	p.idle[pc.addr] = list
	p.mu.Unlock()
	if evicted != nil {
		evicted.conn.Close()
	}
	go p.watch(pc)
}

// watch waits on an idle connection for the first byte, the hub's close,
// or a deadline; if no request took the connection meanwhile, it is
// dropped from the pool and closed.
func (p *Pool) watch(pc *poolConn) {
	_, err := pc.br.Peek(1)
	p.mu.Lock()
	taken := pc.taken
	if !taken {
		pc.taken = true
		list := p.idle[pc.addr]
		for i, x := range list {
			if x == pc {
				p.idle[pc.addr] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	if !taken {
		pc.conn.Close()
	}
	pc.watchErr = err
	close(pc.watchDone)
}
