package loop

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
	"github.com/vk-ci/vk/relay/state"
	"github.com/vk-ci/vk/relay/translate"
)

// A job taken from GitLab that waits on the hub for a node shows an empty
// trace in GitLab: once it has waited waitNoteAfter, the relay writes a
// line saying why, where the job stands and how long it is expected to
// wait, and again at most every waitNoteEvery while the line would
// change. The lines sit at the head of the trace, before the node's
// output (state.Job.Preface).
const (
	waitNoteAfter = 10 * time.Second
	waitNoteEvery = time.Minute
)

// WaitNoteText begins every wait line's text, so a reader of a trace (a
// test comparing it with the node's output) can tell the relay's lines
// from the job's.
const WaitNoteText = "Waiting for a node of the fleet: "

// waitNote is what the tracer wrote about the job's wait.
type waitNote struct {
	since time.Time // when the relay started following the job
	last  time.Time // when it last wrote a line; zero none
	text  string    // the last line's text
	off   bool      // GitLab's trace is not what the relay wrote: stop
}

// waitText is the line for a wait: "Waiting for a node of the fleet: no
// ready node of the placement has room (position 3 of 7, estimated wait
// about 5m40s)".
func waitText(w *client.JobWait) string {
	why := strings.TrimPrefix(w.Reason, "waiting: ")
	var b strings.Builder
	b.WriteString(WaitNoteText + why)
	if w.Waiting > 0 {
		fmt.Fprintf(&b, " (position %d of %d", w.Ahead+1, w.Waiting)
		if w.EstimatedSecs != nil {
			fmt.Fprintf(&b, ", estimated wait about %s", time.Duration(*w.EstimatedSecs)*time.Second)
		} else {
			b.WriteString(", no estimate of the wait yet")
		}
		b.WriteString(")")
	}
	return b.String()
}

// noteWait writes the wait line when it is due. It reports false when ctx
// ended.
func (t *tracer) noteWait(ctx context.Context, w *client.JobWait) bool {
	now := t.m.clk.Now()
	n := &t.note
	text := waitText(w)
	switch {
	case n.off || t.aborted || t.offset != int64(len(t.j.Preface)):
		return true
	case now.Sub(n.since) < waitNoteAfter:
		return true
	case !n.last.IsZero() && (text == n.text || now.Sub(n.last) < waitNoteEvery):
		return true
	}
	if !t.recorded(ctx) {
		return false
	}
	if err := t.catchUpDigest(ctx); err != nil {
		return false
	}
	data := translate.FormatTrace([]translate.Notice{{Level: translate.LevelInfo, Text: text}}, now, t.j.Timestamps)
	p, err := t.m.cfg.GitLab.PatchTrace(ctx, t.creds, t.offset, data, t.j.DebugTrace)
	if ctx.Err() != nil {
		return false
	}
	t.observe(p.JobStatus, p.Aborts(), p.UpdateInterval)
	n.last, n.text = now, text
	switch p.Kind {
	case gitlab.PatchSucceeded:
		sent := data[:p.Sent]
		t.j.Preface += string(sent)
		t.digest.Write(sent)
		t.digestTo += int64(len(sent))
		t.offset = p.NewOffset
		t.lastSent = now
		t.j.TraceOffset = t.offset
		t.m.put(t.r, t.j, t.log)
		if p.Sent < len(data) || t.offset != int64(len(t.j.Preface)) {
			n.off = true
		}
	case gitlab.PatchRangeMismatch:
		n.off = true // GitLab holds something else: leave it be
	default:
		t.log.Info("wait line not written to the trace", "status", p.Status, logkey.Err, err)
	}
	return true
}

// withPreface puts the lines the relay wrote about the job's wait before
// a failure's own, so the failure's trace is GitLab's whole trace.
func (t *tracer) withPreface(f *state.Failure) *state.Failure {
	if t.j.Preface != "" {
		f.Trace = append([]byte(t.j.Preface), f.Trace...)
	}
	return f
}

// hubOffset is the hub's output offset of GitLab's trace offset.
func (t *tracer) hubOffset() int64 { return max(t.offset-int64(len(t.j.Preface)), 0) }
