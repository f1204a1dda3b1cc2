package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/translate"
)

// scriptedGitLab hands out one recorded job response (a gitlab-runner
// fixture internal/gitlabfake cannot produce: run: steps, unknown executor
// options) and then 204s, keeping the trace and updates it receives the way
// Rails does (202 with Range, 416 on a wrong start).
type scriptedGitLab struct {
	mu      sync.Mutex
	job     []byte
	trace   []byte
	updates []gitlab.UpdateJobRequest
	done    chan struct{}
}

func (g *scriptedGitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v4/jobs/request":
		if g.job == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(g.job)
		g.job = nil
	case r.Method == http.MethodPatch:
		var start, end int64
		fmt.Sscanf(r.Header.Get("Content-Range"), "%d-%d", &start, &end)
		if start != int64(len(g.trace)) {
			w.Header().Set("Range", fmt.Sprintf("0-%d", len(g.trace)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		g.trace = append(g.trace, body...)
		w.Header().Set("Range", fmt.Sprintf("0-%d", len(g.trace)))
		w.Header().Set("Job-Status", "running")
		w.WriteHeader(http.StatusAccepted)
	case r.Method == http.MethodPut:
		var u gitlab.UpdateJobRequest
		json.Unmarshal(body, &u)
		g.updates = append(g.updates, u)
		w.Header().Set("Job-Status", string(u.State))
		w.WriteHeader(http.StatusOK)
		if u.State == gitlab.StateFailed {
			close(g.done)
		}
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// A job vk refuses is never submitted: its reservation is released, and it
// is failed in GitLab as the refusal says, with the daemon's own stamped
// trace lines.
//
// spec: TRACE-07, SPEC-22, FAIL-12, RELAY-08, ARB-34
func TestRefusedJob(t *testing.T) {
	for _, tc := range []struct {
		fixture, reason, line string
		exit                  int
	}{
		{"job_response_steps_run.json", gitlab.ReasonRunnerConfigurationError, "ERROR: Job failed: ", 0},
		{"job_response_unsupported_executor_opts.json", gitlab.ReasonRunnerSystemFailure, "ERROR: Job failed (system failure): ", translate.ExitCodeUnsupportedOptions},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			b, err := os.ReadFile("../gitlab/testdata/" + tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			g := &scriptedGitLab{job: b, done: make(chan struct{})}
			srv := httptest.NewServer(g)
			defer srv.Close()
			e := newEnv(t, envOptions{})
			gc, err := gitlab.New(gitlab.Config{URL: srv.URL, Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{Hub: e.hub, Retrier: e.hub.Client().Retrier(), GitLab: gc, SystemID: "s_0123456789ab", Gate: e.gate,
				Clock: e.clk, Log: testlog.New(t), OnChange: e.onChange,
				Runners: []Runner{{Name: "r1", Token: "glrt-test", Store: e.store, Placement: testPlacement,
					Translate: translate.Runner{ServerURL: srv.URL, ShortToken: "test"}}}})
			if err != nil {
				t.Fatal(err)
			}
			e.use(m, 0, 0)
			e.gate.Set(true)
			stop := e.run(m)
			<-g.done
			var adm string
			e.hub.WaitFor(t, "a released outcome", func() bool {
				for _, a := range e.hub.AdmissionsWithLocked(client.OutcomeReleased) {
					adm = a
				}
				return adm != ""
			})
			stop(false)
			g.mu.Lock()
			defer g.mu.Unlock()
			last := g.updates[len(g.updates)-1]
			// The older-GitLab fallback applies with the fixture's
			// failure_reasons (FAIL-12).
			jr, err := gitlab.DecodeJobResponse(b)
			if err != nil {
				t.Fatal(err)
			}
			want := gitlab.MapFailureReason(tc.reason, jr.Features.FailureReasons)
			if last.FailureReason != want || last.ExitCode != tc.exit {
				t.Errorf("final update: failure_reason %q exit %d, want %s exit %d", last.FailureReason, last.ExitCode, want, tc.exit)
			}
			for _, u := range g.updates {
				if u.State == gitlab.StateRunning {
					t.Errorf("refused job committed")
				}
			}
			if !bytes.Contains(g.trace, []byte(tc.line)) || !bytes.Contains(g.trace, []byte(" 00O ")) {
				t.Errorf("trace = %q, want a stamped %q line", g.trace, tc.line)
			}
			if want := gitlab.TraceChecksum(g.trace); last.Output != want {
				t.Errorf("output = %+v, want %+v", last.Output, want)
			}
			if n := e.hub.Count(client.RouteSubmit); n != 0 {
				t.Errorf("%d jobs submitted", n)
			}
			if !e.hub.Claimed[adm] {
				t.Errorf("the refused job's admission %s was not claimed before GitLab was asked", adm)
			}
			if e.store.Len() != 0 {
				t.Errorf("record kept")
			}
			if strings.Contains(string(g.trace), "test-job-token") {
				t.Errorf("job token in the trace")
			}
		})
	}
}
