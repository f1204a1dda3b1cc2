package cmdlog

import (
	"bytes"
	"encoding/json"
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
