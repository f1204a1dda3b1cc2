package cmdlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "shown" || strings.Contains(b.String(), "hidden") {
		t.Errorf("json at warn wrote %q (%v)", b.String(), err)
	}
	b.Reset()
	log, _ = New(&b, "text", "debug")
	log.Debug("dbg")
	if !strings.Contains(b.String(), "level=DEBUG msg=dbg") {
		t.Errorf("text at debug wrote %q", b.String())
	}
	for _, tc := range []struct{ format, level, want string }{
		{"text", "loud", "--log-level"},
		{"xml", "info", "--log-format"},
	} {
		if _, err := New(&b, tc.format, tc.level); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q) = %v, want an error naming %s", tc.format, tc.level, err, tc.want)
		}
	}
}

// A key is written once (the latest value wins: a session's component
// over the hub's) and nil errors are left out.
func TestOneKeyOnceNoNil(t *testing.T) {
	var b bytes.Buffer
	log, _ := New(&b, "json", "info")
	var nilErr error
	var nilPtr *bytes.Buffer
	log = log.With("component", "hub", "relay_id", "r1").With("component", "relay-session")
	log.Info("up", "err", nilErr, "buf", nilPtr, "relay_id", "r2", "n", 0)
	line := b.String()
	if strings.Count(line, `"component"`) != 1 || !strings.Contains(line, `"component":"relay-session"`) ||
		strings.Count(line, `"relay_id"`) != 1 || !strings.Contains(line, `"relay_id":"r2"`) {
		t.Errorf("duplicate keys: %s", line)
	}
	if strings.Contains(line, `"err"`) || strings.Contains(line, `"buf"`) || !strings.Contains(line, `"n":0`) {
		t.Errorf("nil values written, or a zero left out: %s", line)
	}
	b.Reset()
	log.Warn("failed", "err", errors.New("boom"))
	if !strings.Contains(b.String(), `"err":"boom"`) {
		t.Errorf("an error left out: %s", b.String())
	}
	b.Reset()
	text, _ := New(&b, "text", "info")
	text.With("component", "hub").With("component", "node-session").Info("x", "err", nilErr)
	if got := b.String(); strings.Count(got, "component=") != 1 || strings.Contains(got, "err=") {
		t.Errorf("text: %s", got)
	}
}
