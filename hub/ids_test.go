package hub

import (
	"testing"

	"github.com/vk-ci/vk/sched"
	"pgregory.net/rapid"
)

// TestIDMap checks idMap's contract over random key sequences: IDs are
// 1, 2, … in first-seen order, a key keeps its ID, minted is true only
// the first time, and the reverse map names the key.
func TestIDMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOf(rapid.SampledFrom([]string{"a", "b", "c", "d", "e"})).Draw(t, "keys")
		m := newIDMap[string, sched.NodeID]()
		first := map[string]sched.NodeID{}
		for _, k := range keys {
			id, minted := m.id(k)
			want, seen := first[k]
			if !seen {
				want = sched.NodeID(len(first) + 1)
				first[k] = want
			}
			if id != want || minted == seen {
				t.Fatalf("id(%q) = %d, minted %v; want %d, minted %v", k, id, minted, want, !seen)
			}
			if m.keys[id] != k {
				t.Fatalf("keys[%d] = %q, want %q", id, m.keys[id], k)
			}
		}
	})
}

func TestIDTable(t *testing.T) {
	ids := newIDTable()
	if a, b := ids.node("n1"), ids.node("n2"); a != 1 || b != 2 || ids.node("n1") != 1 {
		t.Fatalf("node IDs n1 %d, n2 %d, want 1, 2 and stable", a, b)
	}
	if got := ids.nodeName(2); got != "n2" {
		t.Fatalf("nodeName(2) = %q, want n2", got)
	}
	if got := ids.nodeName(9); got != "" {
		t.Fatalf("nodeName(unknown) = %q, want empty", got)
	}
	// Each kind counts on its own.
	if r, tn := ids.relay("relay-1"), ids.tenant("web"); r != 1 || tn != 1 {
		t.Fatalf("first relay %d, first tenant %d, want 1, 1", r, tn)
	}
	if id, minted := ids.runner("relay-1", "r1"); id != 1 || !minted {
		t.Fatalf("runner(relay-1, r1) = %d %v, want 1 true", id, minted)
	}
	if id, minted := ids.runner("relay-2", "r1"); id != 2 || !minted {
		t.Fatalf("runner(relay-2, r1) = %d %v, want 2 true (same name, other relay)", id, minted)
	}
	if id, minted := ids.runner("relay-1", "r1"); id != 1 || minted {
		t.Fatalf("runner(relay-1, r1) again = %d %v, want 1 false", id, minted)
	}
}
