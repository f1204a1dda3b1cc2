package replay

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
)

// DryRun replays the hub's trace files in dir since since under the
// policy in force and p (`vk-hub capacity-policy set --dry-run`, and what
// a UI dry run calls): the report, and the warnings of [Candidate]. It
// reads the files only; nothing changes.
func DryRun(ctx context.Context, dir string, p admin.Policy, since time.Time, seed uint64, name string) (*Report, []string, error) {
	var buf bytes.Buffer
	if err := wtrace.Export(dir, since, &buf); err != nil {
		return nil, nil, err
	}
	h, recs, err := wtrace.ReadAll(&buf)
	if err != nil {
		return nil, nil, err
	}
	w, err := FromTrace(h, recs)
	if err != nil {
		return nil, nil, fmt.Errorf("the trace since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	cand, warns := Candidate(w.Policy, p)
	rep, err := Run(ctx, w, Options{Name: name, Seed: seed, Candidate: cand})
	return rep, warns, err
}
