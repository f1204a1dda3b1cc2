package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// Floor is what the machine allows, measured in the same run as the
// lifecycles: the cheapest signed request the hub answers, with as many
// concurrent loops as the lifecycle run, on a fresh TLS connection per
// request, on a new connection resuming a TLS session, and on kept-alive
// connections (what hubclient does); and bbolt's durable commits per
// second in the hub's file system from one writer.
type Floor struct {
	FreshPerSec   float64 `json:"fresh_requests_per_sec"`
	ResumedPerSec float64 `json:"resumed_requests_per_sec"`
	KeptPerSec    float64 `json:"kept_requests_per_sec"`
	CommitsPerSec float64 `json:"bbolt_commits_per_sec"`
}

// connMode is how the floor's no-op requests travel.
type connMode int

const (
	connFresh   connMode = iota // a new connection, full handshake, per request
	connResumed                 // a new connection per request, resuming
	connKept                    // kept-alive connections (reqsign.Pool)
)

// noopPath is the signed request that does no work: a relay's client
// hello, which the hub authenticates and then refuses (403, API-09).
const noopPath = "/v1/clients"

// measureFloor runs the signed no-op from loops goroutines for d each
// way, then bbolt commits for d.
func measureFloor(ctx context.Context, t *Target, r relay, loops int, d time.Duration) (Floor, error) {
	var f Floor
	var err error
	if f.FreshPerSec, err = noopRate(ctx, t, r, loops, d, connFresh); err != nil {
		return f, err
	}
	if f.ResumedPerSec, err = noopRate(ctx, t, r, loops, d, connResumed); err != nil {
		return f, err
	}
	if f.KeptPerSec, err = noopRate(ctx, t, r, loops, d, connKept); err != nil {
		return f, err
	}
	f.CommitsPerSec, err = commitRate(t.Dir, d)
	return f, err
}

// noopRate is signed no-op requests per second from loops goroutines.
func noopRate(ctx context.Context, t *Target, r relay, loops int, d time.Duration, mode connMode) (float64, error) {
	_, tcfg, err := t.clientTLS()
	if err != nil {
		return 0, err
	}
	var tr http.RoundTripper = &reqsign.Transport{Key: r.key, Principal: r.id, TLSConfig: tcfg}
	switch mode {
	case connResumed:
		tcfg.ClientSessionCache = tls.NewLRUClientSessionCache(loops)
	case connKept:
		tcfg.ClientSessionCache = tls.NewLRUClientSessionCache(loops)
		tr = &reqsign.Pool{Key: r.key, Principal: r.id, TLSConfig: tcfg, MaxIdle: loops}
	}
	hc := &http.Client{Transport: tr}
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(client.ClientHello{})
	var n atomic.Int64
	var first error
	var once sync.Once
	// Requests run on the caller's context and stop being sent after d:
	// a deadline on the requests themselves would fail the last of them.
	start := time.Now()
	var wg sync.WaitGroup
	for range loops {
		wg.Go(func() {
			for ctx.Err() == nil && time.Since(start) < d {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+noopPath, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					once.Do(func() { first = err })
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					once.Do(func() { first = fmt.Errorf("loadgen: no-op request: status %d, want 403", resp.StatusCode) })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// commitRate is durable bbolt commits per second, each writing one
// 1 KiB value, from one writer, in a file beside the hub's store.
func commitRate(dir string, d time.Duration) (float64, error) {
	path := filepath.Join(dir, "loadgen-floor.db")
	defer os.Remove(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("loadgen: floor store: %w", err)
	}
	defer db.Close()
	val := bytes.Repeat([]byte{'x'}, 1024)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("floor"))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "%016d", n), val)
		})
		if err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
