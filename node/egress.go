package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Egress sampling (NSESS-17..20).
const (
	// EgressEvery is how often a running job's egress is sampled besides
	// each stage start (NSESS-20).
	EgressEvery = 5 * time.Second
	// EgressMinGap is the least time between two samples of a job
	// (NSESS-20).
	EgressMinGap = 2 * time.Second
)

// ErrNetDev wraps a /proc/<pid>/net/dev the node cannot read.
var ErrNetDev = errors.New("node: bad net/dev")

// egressSource reads a job's cumulative egress counters: bytes sent and
// received off the job's network namespace. ok is false while there is
// nothing to read yet (the container is not up).
type egressSource func() (tx, rx int64, ok bool)

// egressMeter is one job's egress state; guarded by Agent.mu, except src,
// which is immutable.
type egressMeter struct {
	src     egressSource
	report  dispatch.EgressReport // the latest; Revision 0 until something changed
	sampled time.Time             // the last sample; zero before the first
}

// ParseNetDev sums the byte counters of /proc/<pid>/net/dev content over
// every interface but loopback: what a network namespace exchanged with
// the outside. Traffic between a job and its services stays on lo and is
// not egress.
func ParseNetDev(b []byte) (tx, rx int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		if line <= 2 {
			continue // the two header lines
		}
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return 0, 0, fmt.Errorf("%w: line %d: no interface name", ErrNetDev, line)
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return 0, 0, fmt.Errorf("%w: line %d: %d fields, want 16", ErrNetDev, line, len(f))
		}
		if strings.TrimSpace(name) == "lo" {
			continue
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		t, err2 := strconv.ParseInt(f[8], 10, 64)
		if err1 != nil || err2 != nil || r < 0 || t < 0 || rx > 1<<62-r || tx > 1<<62-t {
			return 0, 0, fmt.Errorf("%w: line %d: counters %q %q", ErrNetDev, line, f[0], f[8])
		}
		rx += r
		tx += t
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrNetDev, err)
	}
	if line < 2 {
		return 0, 0, fmt.Errorf("%w: no header", ErrNetDev)
	}
	return tx, rx, nil
}

// ociEgress reads the egress of the oci backend's job id: the network
// namespace of its container's init, found once with `runc state`.
func (a *Agent) ociEgress(id string) egressSource {
	var pid int
	return func() (int64, int64, bool) {
		if pid == 0 {
			runc := a.cfg.Executor.Runc
			if runc == "" {
				runc = "runc"
			}
			out, err := osexec.Command(runc, "--root", filepath.Join(a.be.ociRoot, ".runc"), "state", id).Output()
			if err != nil {
				return 0, 0, false // not created yet, or gone
			}
			var st struct {
				Pid    int    `json:"pid"`
				Status string `json:"status"`
			}
			if json.Unmarshal(out, &st) != nil || st.Pid <= 0 || st.Status != "running" {
				return 0, 0, false
			}
			pid = st.Pid
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
		if err != nil {
			return 0, 0, false
		}
		tx, rx, err := ParseNetDev(b)
		if err != nil {
			a.log.Warn("egress not measured", logkey.JobID, id, logkey.Err, err)
			return 0, 0, false
		}
		return tx, rx, true
	}
}

// sampleEgress samples jr's egress unless it was sampled less than
// EgressMinGap ago, and sends an egress frame when it changed, on a
// session of version 6 or more (NSESS-17, NSESS-20). Each change takes
// the next revision (NSESS-19). It is called at each stage start and by
// egressLoop.
func (a *Agent) sampleEgress(jr *jobRun) {
	a.mu.Lock()
	m := jr.egress
	now := a.clk.Now()
	if m == nil || jr.result != nil || (!m.sampled.IsZero() && now.Sub(m.sampled) < EgressMinGap) {
		a.mu.Unlock()
		return
	}
	m.sampled = now
	a.mu.Unlock()
	tx, rx, ok := m.src() // reads /proc: not under the lock
	a.mu.Lock()
	defer a.mu.Unlock()
	sent := false
	if ok && jr.egress == m && (tx != m.report.TxBytes || rx != m.report.RxBytes) && jr.result == nil {
		m.report.Revision++
		m.report.TxBytes, m.report.RxBytes = tx, rx
		if a.connected && a.sessVersion >= dispatch.VersionEgress {
			a.send(&dispatch.Egress{Job: jr.id, Report: m.report})
			sent = true
		}
	}
	if a.opts.egressSampled != nil {
		a.opts.egressSampled(jr.id, sent)
	}
}

// egressLoop samples jr's egress every EgressEvery until done closes;
// first is the first period's timer, armed by the caller.
func (a *Agent) egressLoop(jr *jobRun, done <-chan struct{}, first clock.Timer) {
	for t := first; ; t = a.clk.NewTimer(EgressEvery) {
		select {
		case <-done:
			t.Stop()
			return
		case <-a.runCtx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		a.sampleEgress(jr)
	}
}

// resendEgressLocked repeats every running job's latest egress report on
// a new session (NSESS-17: after a reconnect).
func (a *Agent) resendEgressLocked() {
	if a.sessVersion < dispatch.VersionEgress {
		return
	}
	for _, jr := range a.jobs {
		if m := jr.egress; m != nil && jr.result == nil && m.report.Revision > 0 {
			a.send(&dispatch.Egress{Job: jr.id, Report: m.report})
		}
	}
}

// finalEgressLocked is the report a result carries (NSESS-19: the last
// and highest revision); nil for a job whose egress is not measured.
func (jr *jobRun) finalEgressLocked() *dispatch.EgressReport {
	if jr.egress == nil {
		return nil
	}
	r := jr.egress.report
	if r.Revision == 0 {
		r.Revision = 1 // nothing changed: zero egress, the first revision
	}
	return &r
}
