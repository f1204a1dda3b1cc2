package node

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/proto/job"
)

// authLog is a registry stand-in that asks for Basic credentials and
// records the Authorization of every request; with credentials it has no
// cache (404), so restore_cache misses and archive_cache fails quietly.
type authLog struct {
	mu    sync.Mutex
	auths []string
	// answer, when set, answers every request instead (after it is
	// recorded).
	answer http.HandlerFunc
}

func (l *authLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.auths = append(l.auths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	l.mu.Unlock()
	if l.answer != nil {
		l.answer(w, r)
		return
	}
	if r.Header.Get("Authorization") == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="vk-test"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	http.NotFound(w, r)
}

func (l *authLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.auths...)
}

// Which credential a start without a cache repository uses for its
// caches: under [registry] guest_credential = "node" (the default) the
// node's own, sent to the node's registry; under "job" none at all — the
// job runs without caches, its trace says why in restore_cache and
// archive_cache, and the registry sees no request.
//
// spec: XFER-15
func TestGuestCredentialDecidesCaches(t *testing.T) {
	nodeAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("vk-node:node-password"))
	for _, mode := range []string{GuestCredentialNode, GuestCredentialJob} {
		t.Run(mode, func(t *testing.T) {
			reg := &authLog{}
			srv := httptest.NewServer(reg)
			defer srv.Close()
			h, _ := connected(t, func(c *Config) {
				c.Registry = RegistryConfig{URL: srv.URL, Username: "vk-node", Password: Secret("node-password"),
					RepositoryPrefix: "ci-cache", GuestCredential: mode}
			}, Options{})
			spec := testSpec("mkdir -p .cache && echo c > .cache/f")
			spec.GitLabCI.Caches = []job.Cache{{Key: "deps", Paths: []string{".cache"}}}
			from := h.mark()
			startWith(t, h, "job-cache", "r1", spec)
			res := resultOf(h, from, "job-cache")
			out := string(h.output("job-cache"))
			if res.Result.Failure != "" {
				t.Fatalf("job failed %q:\n%s", res.Result.Failure, out)
			}
			reqs := reg.requests()
			const why = "WARNING: Skipping the cache: this node keeps caches only in a cache repository minted for the job"
			switch mode {
			case GuestCredentialJob:
				if len(reqs) != 0 {
					t.Errorf("guest_credential = job: the registry saw %d requests: %v", len(reqs), reqs)
				}
				if n := strings.Count(out, why); n != 2 {
					t.Errorf("the trace says why %d times, want in restore_cache and archive_cache:\n%s", n, out)
				}
			default:
				withNode := 0
				for _, r := range reqs {
					if strings.HasSuffix(r, " "+nodeAuth) {
						withNode++
					}
				}
				if withNode == 0 {
					t.Errorf("guest_credential = node: no request carried the node's credential: %v", reqs)
				}
				if strings.Contains(out, "Skipping the cache: this node keeps caches only") {
					t.Errorf("guest_credential = node: the job was run without caches:\n%s", out)
				}
			}
		})
	}
}
