package translate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/translate"
)

// A relay's conversation with GitLab about one job, against a stand-in
// GitLab: take the job, translate it, commit it, patch the trace, finish.
func Example() {
	body, err := os.ReadFile("../gitlab/testdata/job_response_gitlab_complete.json")
	if err != nil {
		panic(err)
	}
	var trace strings.Builder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/v4/jobs/request":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
		case strings.HasSuffix(r.URL.Path, "/trace"):
			b, _ := io.ReadAll(r.Body)
			trace.Write(b)
			w.Header().Set("X-GitLab-Trace-Update-Interval", "60")
			w.WriteHeader(http.StatusAccepted)
		default: // PUT /jobs/:id
			w.Header().Set("Job-Status", "running")
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	gl, err := gitlab.New(gitlab.Config{URL: srv.URL})
	if err != nil {
		panic(err)
	}
	got, err := gl.RequestJob(ctx, "glrt-EXAMPLE", "s_0123456789ab")
	if err != nil || got.Kind != gitlab.RequestJobReceived {
		panic(fmt.Sprint(got.Kind, err))
	}
	res, err := translate.Translate(got.Job, translate.Runner{ServerURL: srv.URL, RunnerID: 7,
		ShortToken: gitlab.ShortToken("glrt-EXAMPLE")})
	if err != nil {
		panic(err)
	}
	fmt.Println("job", res.Job.Job.ID, "project", res.Job.Job.ProjectPath, "repo", res.Job.Sources.RepoURL)
	fmt.Println("cache", res.Job.Caches[0].Key, "service alias", res.Job.Services[0].Alias)

	creds := gitlab.JobCredentials{ID: got.Job.ID, Token: got.Job.Token}
	commit, _ := gl.UpdateJob(ctx, creds, gitlab.UpdateJobInfo{State: gitlab.StateRunning})
	fmt.Println("commit", commit.Kind)

	out := []byte("node output\n")
	patch, _ := gl.PatchTrace(ctx, creds, 0, out, got.Job.DebugTrace())
	fmt.Println("patched to", patch.NewOffset, "next in", gitlab.NextUpdateInterval(gitlab.DefaultUpdateInterval, patch.UpdateInterval))

	reason := gitlab.MapFailureReason(gitlab.FailureReasonFor("script"), got.Job.Features.FailureReasons)
	final, _ := gl.UpdateJob(ctx, creds, gitlab.UpdateJobInfo{State: gitlab.StateFailed, FailureReason: reason,
		Output: gitlab.TraceChecksum(out), ExitCode: 1})
	fmt.Println("final", final.Kind, reason, "trace", strings.TrimSpace(trace.String()))
	// Output:
	// job 4242 project acme/demo repo https://gitlab.example.com/acme/demo.git
	// cache gems-main-protected service alias db
	// commit succeeded
	// patched to 12 next in 1m0s
	// final succeeded script_failure trace node output
}
