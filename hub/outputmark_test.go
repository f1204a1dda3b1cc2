package hub

import (
	"context"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// spec: FAIL-19
// hub/output does not sync a completion mark on its own (its package
// doc): the finished job's record is what is durable. After a crash that
// lost the mark, the restored hub marks the finished job's output
// complete again from its record, so a reader of the output sees its end
// instead of waiting for more.
func TestRestartMarksFinishedOutputComplete(t *testing.T) {
	h := newHarness(t, nil)
	// The crash lost the mark: an output store that never writes it.
	h.wrapOutput = func(o output.Store) output.Store { return markless{o} }
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.finishedWithOutput(71, "abcd")
	path := "/v1/jobs/" + v.ID + "/output"
	if code, body, hdr := h.call("GET", path, nil); code != 200 || string(body) != "abcd" || hdr.Get(client.HeaderOutputComplete) == "true" {
		t.Fatalf("output before the crash = %d %q complete %q; want it without its mark", code, body, hdr.Get(client.HeaderOutputComplete))
	}
	if err := h.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.wrapOutput = nil
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

// markless is an output store whose completion marks are lost.
type markless struct{ output.Store }

func (markless) MarkComplete(context.Context, string) error { return nil }
