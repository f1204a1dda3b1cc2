package gitlab

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/internal/clock"
)

// A failed job's final update that GitLab answers with Job-Status failed
// is routine (info); a running job's update answered canceled is not.
func TestUpdateLogLevel(t *testing.T) {
	var mu sync.Mutex // guards status and buf
	status := "failed"
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		w.Header().Set("Job-Status", status)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	c, err := New(Config{URL: s.URL, Logger: log, Clock: clock.NewFake(testNow)})
	if err != nil {
		t.Fatal(err)
	}
	out := TraceOutput{Checksum: "crc32:0", Bytesize: 1}
	c.UpdateJob(t.Context(), JobCredentials{ID: 1, Token: "t"}, UpdateJobInfo{State: StateFailed, FailureReason: ReasonScriptFailure, Output: out})
	mu.Lock()
	got := buf.String()
	buf.Reset()
	mu.Unlock()
	if !strings.Contains(got, `msg="updating job"`) || strings.Contains(got, "level=WARN") {
		t.Errorf("final failed update answered failed logged:\n%s", got)
	}
	mu.Lock()
	status = "canceled"
	mu.Unlock()
	c.UpdateJob(t.Context(), JobCredentials{ID: 1, Token: "t"}, UpdateJobInfo{State: StateRunning, Output: out})
	mu.Lock()
	got = buf.String()
	mu.Unlock()
	if !strings.Contains(got, "level=WARN") {
		t.Errorf("a running job's update answered canceled logged:\n%s", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
