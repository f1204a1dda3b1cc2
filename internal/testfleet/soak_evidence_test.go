package testfleet_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/vk-ci/vk/internal/testlog"
)

var soakKeep = flag.String("soak.keep", "", "directory for the HA soak's evidence (every component's log, the client-API history); "+
	"empty: a new directory under $TMPDIR, kept only when the soak fails")

// soakEvidence is where the HA soak keeps what explaining a failure
// needs, outside the test's temporary directory (which go test removes):
// fleet.log, every component's log (the hub processes' included) as the
// test's own log has it; history.jsonl, every recorded client-API
// operation; and, for an object whose history the model refuses, a
// porcupine visualization of that object's operations. The directory is
// removed after a passing run unless -soak.keep named it; a failing run
// logs where it is.
type soakEvidence struct {
	dir string
	log *os.File
}

// keepSoakEvidence makes the evidence directory for the soak of the given
// seed. Call it before the fleet starts, so that the fleet's cleanup
// (which logs) runs before the log file is closed.
func keepSoakEvidence(t *testing.T, seed uint64) *soakEvidence {
	t.Helper()
	dir := *soakKeep
	var err error
	if dir != "" {
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", fmt.Sprintf("vk-hasoak-%d-", seed))
	}
	if err != nil {
		t.Fatalf("soak evidence: %v", err)
	}
	f, err := os.Create(filepath.Join(dir, "fleet.log"))
	if err != nil {
		t.Fatalf("soak evidence: %v", err)
	}
	e := &soakEvidence{dir: dir, log: f}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() || *soakKeep != "" {
			t.Logf("soak evidence kept in %s (fleet.log, history.jsonl, a visualization per refused object)", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return e
}

// logger writes every record both to t's log and to fleet.log.
func (e *soakEvidence) logger(t *testing.T) *slog.Logger {
	file := slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(slog.NewMultiHandler(testlog.New(t).Handler(), file))
}

// writeHistory writes ops to history.jsonl, one JSON object a line: the
// client, the call and return times (ns since the recorder started) and
// the model's description of the operation.
func (e *soakEvidence) writeHistory(ops []porcupine.Operation) error {
	f, err := os.Create(filepath.Join(e.dir, "history.jsonl"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w) // one object and a newline per Encode
	for _, op := range ops {
		line := struct {
			Client int    `json:"client"`
			Call   int64  `json:"call"`
			Return int64  `json:"return"`
			Op     string `json:"op"`
		}{op.ClientId, op.Call, op.Return, apiModel.DescribeOperation(op.Input, op.Output)}
		if err := enc.Encode(line); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// visualize writes porcupine's visualization of one object's operations,
// which the model refuses, to <key>.html and returns its path.
func (e *soakEvidence) visualize(key string, part []porcupine.Operation) (string, error) {
	_, info := porcupine.CheckOperationsVerbose(apiModel, part, 30*time.Second)
	name := strings.NewReplacer(":", "-", "/", "-").Replace(key) + ".html"
	path := filepath.Join(e.dir, name)
	return path, porcupine.VisualizePath(apiModel, info, path)
}

// A refused history leaves its evidence: every operation in
// history.jsonl, and a visualization of the refused object only.
func TestSoakEvidenceOfARefusedHistory(t *testing.T) {
	ev := &soakEvidence{dir: t.TempDir()}
	op := func(c int, call int64, key string, out apiOut) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: apiIn{Op: opView, Key: key}, Call: call, Output: out, Return: call + 1}
	}
	ops := []porcupine.Operation{
		op(0, 0, "job:good", apiOut{Rank: 0, Rev: 1}),
		op(0, 2, "job:bad", apiOut{Rank: 1, Rev: 2}),
		op(1, 4, "job:bad", apiOut{Rank: 1, Rev: 1}), // the revision goes back
		op(1, 6, "job:good", apiOut{Rank: 1, Rev: 2}),
	}
	bad := illegalKeys(ops)
	if !slices.Equal(bad, []string{"job:bad"}) {
		t.Fatalf("illegalKeys = %v, want [job:bad]", bad)
	}
	var part []porcupine.Operation
	for _, o := range ops {
		if o.Input.(apiIn).Key == "job:bad" {
			part = append(part, o)
		}
	}
	path, err := ev.visualize("job:bad", part)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "job-bad.html" {
		t.Errorf("visualization at %s, want job-bad.html", path)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "job:bad") || strings.Contains(string(page), "job:good") {
		t.Errorf("the visualization should show job:bad's operations and no other object's")
	}

	if err := ev.writeHistory(ops); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(ev.dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != len(ops) {
		t.Fatalf("history.jsonl has %d lines, want %d", len(lines), len(ops))
	}
	for i, l := range lines {
		var rec struct {
			Client       int
			Call, Return int64
			Op           string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		want := apiModel.DescribeOperation(ops[i].Input, ops[i].Output)
		if rec.Client != ops[i].ClientId || rec.Call != ops[i].Call || rec.Return != ops[i].Return || rec.Op != want {
			t.Errorf("line %d = %+v, want client %d [%d, %d] %q", i+1, rec, ops[i].ClientId, ops[i].Call, ops[i].Return, want)
		}
	}
}
