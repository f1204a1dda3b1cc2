package testfleet_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testlog"
)

// forms are s as it may sit in a file: plain, JSON-escaped, and the parts
// of its base64 encoding that appear whatever its alignment.
func forms(s string) []string {
	esc, _ := json.Marshal(s)
	out := []string{s, string(esc[1 : len(esc)-1])}
	for i := 0; i < 3; i++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", i) + s))
		if g, e := (i+2)/3, (i+len(s))/3; e > g {
			out = append(out, enc[g*4:e*4])
		}
	}
	return out
}

// TestSecretsNeverAtRest runs a job whose project, pipeline and job carry
// canary secrets of every kind GitLab sends (masked, file and private
// variables, the job token in CI_JOB_TOKEN and inside CI_REPOSITORY_URL;
// the masked value is also written into a script line) through GitLab, the
// relay, the hub and a node, then scans every file
// under the hub's state dir (bbolt, output, pki, …) and every log line of
// the fleet for each canary in plain, JSON-escaped and base64 forms.
//
// spec: AUTH-03, AUTH-07
func TestSecretsNeverAtRest(t *testing.T) {
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewMultiHandler(testlog.New(t).Handler(), slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	f := newFleet(t, testfleet.Options{Log: log})
	tn := f.Tenants()[0]
	canaries := map[string]string{
		"masked":  "CANARY-masked-7c1d9e",
		"file":    "CANARY-file-3b8f20",
		"private": "CANARY-private-a4e611",
	}
	spec := oneJob("deploy", "echo deploying", `test "$DEPLOY_KEY" = CANARY-masked-7c1d9e`)
	spec.Jobs[0].Variables = []gitlabfake.Variable{
		{Key: "DEPLOY_KEY", Value: canaries["masked"], Masked: true},
		{Key: "SSH_KEY_FILE", Value: canaries["file"], File: true},
		{Key: "PRIVATE_NOTE", Value: canaries["private"]},
		{Key: "VISIBLE", Value: "plain-public-value", Public: true},
	}
	pl, err := tn.CreatePipeline("acme/secrets", readme, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tn.WaitFinished(timeout(t, 90*time.Second), pl)
	if err != nil {
		t.Fatal(err)
	}
	ji, _ := tn.GitLab.Job(pl.Jobs["deploy"])
	if st["deploy"] != gitlabfake.StateSuccess {
		t.Fatalf("deploy = %s (%s), trace:\n%s", st["deploy"], ji.FailureReason, ji.Trace)
	}
	if len(ji.Token) < 8 {
		t.Fatalf("job token %q", ji.Token)
	}
	canaries["job token"] = ji.Token
	dir := f.Hub().StateDir()
	if err := f.Close(); err != nil {
		t.Logf("fleet close: %v", err)
	}
	scanned := 0
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanned++
		for kind, c := range canaries {
			for _, form := range forms(c) {
				if bytes.Contains(b, []byte(form)) {
					t.Errorf("%s holds the %s secret (as %q)", path, kind, form)
				}
			}
		}
		return nil
	})
	if err != nil || scanned < 2 {
		t.Fatalf("scanning %s: %d files, %v", dir, scanned, err)
	}
	// The hub's own log lines carry no secret either (the relay and node
	// lines share the buffer; the hub's are component=hub and its
	// sessions').
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `"component":"hub"`) && !strings.Contains(line, `-session"`) {
			continue
		}
		for kind, c := range canaries {
			if strings.Contains(line, c) {
				t.Errorf("hub log line holds the %s secret: %s", kind, line)
			}
		}
	}
	t.Logf("scanned %d files under %s", scanned, dir)
}
