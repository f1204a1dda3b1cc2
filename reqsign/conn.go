package reqsign

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
)

// connSeq is what a verifier remembers of one connection: the largest
// sequence number it accepted there, and the connection's exporter value
// (a function of its TLS secrets only, so the same for every request on
// it; [ConnExporter]).
type connSeq struct {
	mu   sync.Mutex
	used bool   // a request was accepted on the connection
	last uint64 // the largest sequence number accepted, while used

	ekmState *tls.ConnectionState // the state ekm was exported from; guarded by mu
	ekm      []byte               // guarded by mu
}

type connSeqKey struct{}

// TrackConn returns ctx carrying a new, empty sequence record for one
// connection. A server that keeps connections alive must call it once per
// connection (an http.Server's ConnContext; see [ConnContext]) so that
// [CheckSeq] can refuse a request replayed on its own connection.
func TrackConn(ctx context.Context) context.Context {
	return context.WithValue(ctx, connSeqKey{}, &connSeq{})
}

// ConnContext is [TrackConn] in the shape of http.Server's ConnContext.
func ConnContext(ctx context.Context, _ net.Conn) context.Context { return TrackConn(ctx) }

// CheckSeq records that a request with sequence number seq, whose
// signature verified, was accepted on the connection of ctx. It returns
// an error wrapping [ErrReplay] when the connection already accepted a
// request with that number or a larger one; a v1 request (seq 0) is
// therefore accepted only as its connection's first. Without a record in
// ctx ([TrackConn]) a v1 request is accepted (the server must then serve
// one request per connection, as v1 clients expect) and a v2 request is
// refused: a sequence nobody checks protects nothing.
func CheckSeq(ctx context.Context, seq uint64) error {
	cs, ok := ctx.Value(connSeqKey{}).(*connSeq)
	if !ok {
		if seq == 0 {
			return nil
		}
		return fmt.Errorf("%w: this server tracks no sequence for the connection", ErrReplay)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.used && seq <= cs.last {
		return fmt.Errorf("%w: sequence %d after %d", ErrReplay, seq, cs.last)
	}
	cs.used, cs.last = true, seq
	return nil
}

// ConnExporter is [Exporter] for a request whose context came from
// [TrackConn]: it derives the connection's exporter value once and hands
// the same bytes to every later request on that connection, which must
// not modify them. What it remembers is the connection's key material,
// not any verdict: every request's signature is still verified, against
// this value, on its own (AUTH-14). The value is reused only for the very
// connection state it came from (the *tls.ConnectionState that net/http
// hands every request of one connection); for another state, or a
// context without a record, it derives the value afresh.
func ConnExporter(ctx context.Context, cs *tls.ConnectionState) ([]byte, error) {
	rec, ok := ctx.Value(connSeqKey{}).(*connSeq)
	if !ok || cs == nil {
		return Exporter(cs)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.ekmState == cs {
		return rec.ekm, nil
	}
	ekm, err := Exporter(cs)
	if err != nil {
		return nil, err
	}
	rec.ekmState, rec.ekm = cs, ekm
	return ekm, nil
}
