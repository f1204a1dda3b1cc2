package reqsign

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// connSeq is what a verifier remembers of one connection: the largest
// sequence number it accepted there.
type connSeq struct {
	mu   sync.Mutex
	used bool   // a request was accepted on the connection
	last uint64 // the largest sequence number accepted, while used
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
