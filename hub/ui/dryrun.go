package ui

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/sim/replay"
)

// The capacity-policy dry run (docs/replay.md): an operator pastes or
// uploads a candidate policy, the UI replays the hub's workload trace
// over a window under the policy in force and the candidate, and shows
// the report. It reads the trace files only; nothing changes — not the
// policy, not the audit log.

const (
	// formDryRun is the dry run form's CSRF kind.
	formDryRun = "policy.dry_run"
	// maxPolicyForm bounds a dry run's POST body: the policy file, pasted
	// or uploaded, and the form's fields.
	maxPolicyForm = 256 << 10
	// DefaultDryRunTimeout bounds one dry run's replay.
	DefaultDryRunTimeout = 2 * time.Minute
)

// dryRunWindows are the windows the form offers; the first is the
// default (what `vk-hub capacity-policy set --dry-run` replays).
var dryRunWindows = []string{"24h", "6h", "1h", "72h"}

// dryRunView is the dry run page's data.
type dryRunView struct {
	// Off says why there is no trace to replay ("" when there is one).
	Off string
	// Windows are the window choices; Window the chosen one.
	Windows []string
	Window  string
	// Policy is the candidate's text as the operator gave it (the form
	// keeps it), Name the uploaded file's name or "pasted policy".
	Policy, Name string
	// Report is the replay's text report, Warnings what the candidate's
	// mapping onto the trace could not keep; both empty before a run.
	Report   string
	Warnings []string
}

// dryRunForm serves GET <base>/policy/dry-run: the form, with the policy
// in force as the text to edit.
func (s *server) dryRunForm(w http.ResponseWriter, r *http.Request) error {
	_, text, err := s.policyInForce(r.Context())
	if err != nil {
		return err
	}
	v := dryRunView{Off: s.dryRunOff(), Windows: dryRunWindows, Window: dryRunWindows[0], Policy: string(text)}
	return s.render(w, r, http.StatusOK, "dryrun", "Capacity policy dry run", "policy", v)
}

func (s *server) dryRunOff() string {
	if s.cfg.TraceDir == "" {
		return "The hub records no workload trace ([trace] disabled = true), so there is nothing to replay."
	}
	return ""
}

// dryRun serves POST <base>/policy/dry-run: policy (pasted) or file
// (uploaded; it wins when not empty), window. One dry run at a time; a
// second is refused while one runs.
func (s *server) dryRun(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxPolicyForm)
	if err := r.ParseMultipartForm(maxPolicyForm); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return fmt.Errorf("%w: %v", ErrBadForm, err)
	}
	if err := s.verify(r, formDryRun); err != nil {
		return err
	}
	v := dryRunView{Off: s.dryRunOff(), Windows: dryRunWindows, Window: r.PostFormValue("window"), Name: "pasted policy"}
	if !slices.Contains(dryRunWindows, v.Window) {
		return fmt.Errorf("%w: window %q: want one of %s", ErrBadForm, v.Window, strings.Join(dryRunWindows, ", "))
	}
	data, name, err := policyUpload(r)
	if err != nil {
		return err
	}
	v.Policy, v.Name = string(data), cmp.Or(name, v.Name)
	if v.Off != "" {
		return s.render(w, r, http.StatusOK, "dryrun", "Capacity policy dry run", "policy", v)
	}
	p, err := admin.DecodePolicy(v.Name, data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadForm, err)
	}
	select {
	case s.dryRuns <- struct{}{}:
		defer func() { <-s.dryRuns }()
	default:
		return fmt.Errorf("%w: another dry run is running; try again when it ends", ErrBadForm)
	}
	window, _ := time.ParseDuration(v.Window)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DryRunTimeout)
	defer cancel()
	rep, warns, err := replay.DryRun(ctx, s.cfg.TraceDir, p, s.clk.Now().Add(-window), 1, "dry run of "+v.Name)
	if err != nil {
		return fmt.Errorf("%w: the replay failed: %v", ErrBadForm, err)
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		return err
	}
	v.Report, v.Warnings = out.String(), warns
	return s.render(w, r, http.StatusOK, "dryrun", "Capacity policy dry run", "policy", v)
}

// policyUpload is the candidate policy of a dry run's form: the uploaded
// file when one was sent and is not empty (with its name), else the
// pasted text.
func policyUpload(r *http.Request) ([]byte, string, error) {
	if f, h, err := r.FormFile("file"); err == nil {
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxPolicyForm))
		if err != nil {
			return nil, "", fmt.Errorf("%w: the uploaded file: %v", ErrBadForm, err)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			return b, h.Filename, nil
		}
	}
	text := strings.ReplaceAll(r.PostFormValue("policy"), "\r\n", "\n")
	if strings.TrimSpace(text) == "" {
		return nil, "", fmt.Errorf("%w: no policy: paste one or choose a file", ErrBadForm)
	}
	return []byte(text), "", nil
}
