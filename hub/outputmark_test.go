package hub

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// spec: FAIL-19
// hub/output does not fsync a completion mark on its own (the mode of the
// job's output file; its package doc): the finished job's record is what
// is durable. After a crash that lost the mark, the restored hub marks the
// finished job's output complete again from its record, so a reader of
// the output sees its end instead of waiting for more.
func TestRestartMarksFinishedOutputComplete(t *testing.T) {
	h := newHarness(t, nil)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.finishedWithOutput(71, "abcd")
	path := "/v1/jobs/" + v.ID + "/output"
	if code, body, hdr := h.call("GET", path, nil); code != 200 || string(body) != "abcd" || hdr.Get(client.HeaderOutputComplete) != "true" {
		t.Fatalf("output before the crash = %d %q complete %q", code, body, hdr.Get(client.HeaderOutputComplete))
	}
	if err := h.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The crash lost the mark: the file is as it was before completion.
	if err := os.Chmod(filepath.Join(h.dir, "output", v.ID+".out"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.start()
	// The restore's mark goes through the hub's writer: poll for it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, body, hdr := h.call("GET", path, nil)
		if code != 200 || string(body) != "abcd" {
			t.Fatalf("output after the restart = %d %q", code, body)
		}
		if hdr.Get(client.HeaderOutputComplete) == "true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the finished job's output is still incomplete 10 s after the restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
