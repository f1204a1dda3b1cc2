// Package state keeps vk-gitlab's per-runner state files (RELAY-05..09,
// AUTH-16): one JSON file per runner, <state_dir>/<runner name>.json, mode
// 0600, in a state directory of mode 0700 that the daemon refuses to use when
// group or others have any access to it.
//
// A file records every job the runner took from GitLab, from before it is
// submitted to the hub or committed in GitLab (RELAY-07) until the hub has
// settled it (RELAY-08), and the relay ID that wrote it (AUTH-16). Every
// change is written atomically: a temporary file in the same directory is
// written and fsynced, renamed over the file, and the directory fsynced, so a
// crash leaves either the old or the new content, never a mix (RELAY-09).
//
// A job's life in the file:
//
//	taken ──▶ submitted ──▶ committed ──▶ reported ──▶ (removed after settle)
//	  │           │                           ▲
//	  └──▶ failing (refused, never submitted) ┘ (removed once failed in GitLab)
package state

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// FileVersion is the format version written in every state file.
const FileVersion = 1

// Errors.
var (
	// ErrDirMode: the state directory is accessible to group or others
	// (RELAY-05); the daemon refuses to start.
	ErrDirMode = errors.New("state: state directory is accessible to group or others")
	// ErrRelay: a state file holding jobs was written by another relay, or
	// before relays existed (AUTH-16); the daemon refuses to start.
	ErrRelay = errors.New("state: state file belongs to another relay")
	// ErrFormat: a state file does not decode.
	ErrFormat = errors.New("state: undecodable state file")
	// ErrName: a runner name cannot name a state file.
	ErrName = errors.New("state: runner name not usable as a file name")
)

// Phase is where a recorded job is in the relay's handling.
type Phase string

// Phases, in order.
const (
	// PhaseTaken: GitLab gave the job; not yet accepted by the hub. The
	// record holds the GitLab response so a restarted daemon can submit it
	// again with the same request_id (RELAY-09).
	PhaseTaken Phase = "taken"
	// PhaseSubmitted: the hub accepted the submission (HubJob set).
	PhaseSubmitted Phase = "submitted"
	// PhaseCommitted: GitLab was told state=running (GL-08).
	PhaseCommitted Phase = "committed"
	// PhaseReported: the final update reached GitLab; only the settle is
	// left (RELAY-17: the next start settles it).
	PhaseReported Phase = "reported"
	// PhaseFailing: the job will not run (refused, undecodable, approval
	// refusal, unplaceable); it is to be failed in GitLab with Failure.
	PhaseFailing Phase = "failing"
)

// Failure is how a job that never ran is to be failed in GitLab.
type Failure struct {
	// Reason is GitLab's failure_reason before the older-GitLab fallback.
	Reason string `json:"reason"`
	// ExitCode is sent when non-zero.
	ExitCode int `json:"exit_code,omitempty"`
	// Trace is what the relay writes into the trace itself (TRACE-07),
	// already formatted.
	Trace []byte `json:"trace,omitempty"`
}

// Job is one recorded job. The zero value is not a valid record: GitLabID and
// Token are required.
type Job struct {
	// GitLabID is GitLab's job ID; it keys the record.
	GitLabID int64 `json:"gitlab_id"`
	// Token is the job token (secret; the file is 0600).
	Token string `json:"token"`
	// HubJob is the hub's job ID; empty before the submission was accepted.
	HubJob string `json:"hub_job,omitempty"`
	// Admission and Reservation are the grant the job was taken under;
	// empty when none.
	Admission   string `json:"admission,omitempty"`
	Reservation string `json:"reservation,omitempty"`
	// ReserveRequestID is the request_id of the reservation request.
	ReserveRequestID string `json:"reserve_request_id,omitempty"`
	// SubmitRequestID is the request_id of the job submission, kept so a
	// resubmission replays (API-43). Required.
	SubmitRequestID string `json:"submit_request_id"`
	// Timestamps is the job's FF_TIMESTAMPS (TRACE-07): whether lines the
	// relay writes itself are stamped.
	Timestamps bool `json:"ff_timestamps"`
	// DebugTrace is CI_DEBUG_TRACE, sent with every trace patch (GL-10).
	DebugTrace bool `json:"debug_trace,omitempty"`
	// FailureReasons is the job's features.failure_reasons, for the
	// older-GitLab fallback of the final update (FAIL-12).
	FailureReasons []string `json:"failure_reasons,omitempty"`
	// ProjectID and ProjectPath name the job's project for messages.
	ProjectID   int64  `json:"project_id,omitempty"`
	ProjectPath string `json:"project_path,omitempty"`
	// Phase is where the job is.
	Phase Phase `json:"phase"`
	// Response is GitLab's job response, kept while the job is taken and
	// submitted, until a node accepted it (committed in GitLab), so that a
	// job a new hub leader forgot can be submitted again; nil afterwards.
	Response json.RawMessage `json:"response,omitempty"`
	// Failure is set in PhaseFailing.
	Failure *Failure `json:"failure,omitempty"`
	// TraceOffset is the last trace offset GitLab acknowledged, a hint
	// for a restart (GitLab's 416 answer is authoritative, GL-11).
	TraceOffset int64 `json:"trace_offset,omitempty"`
	// Preface is what the relay itself wrote at the head of the job's
	// GitLab trace before any of the hub's output (why the job waits for
	// a node): GitLab's trace is Preface, then the hub's output, so the
	// hub's offset is GitLab's less its length.
	Preface string `json:"preface,omitempty"`
	// Taken is when GitLab gave the job (UTC).
	Taken time.Time `json:"taken"`
	// CorrelationID is the job request's X-Request-Id as GitLab answered
	// it (else as sent), carried to the node for get_sources.
	CorrelationID string `json:"correlation_id,omitempty"`
}

// file is the JSON content of a state file.
type file struct {
	Version int    `json:"version"`
	Relay   string `json:"relay"`
	Runner  string `json:"runner"`
	Jobs    []Job  `json:"jobs"`
}

// CheckDir makes sure dir exists as a directory that only its owner can
// access (RELAY-05): it is created mode 0700 when missing; an existing one
// with any group or other permission bit fails with ErrDirMode.
func CheckDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state: create %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state: %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s is mode %04o; run chmod 0700 %s (or install -d -m 0700 -o <user> -g <group> %s)",
			ErrDirMode, dir, fi.Mode().Perm(), dir, dir)
	}
	return nil
}

// FileName returns the state file of runner: <dir>/<runner>.json.
func FileName(dir, runner string) (string, error) {
	if runner == "" || runner == "." || runner == ".." || strings.ContainsAny(runner, `/\`+"\x00") {
		return "", fmt.Errorf("%w: %q", ErrName, runner)
	}
	return filepath.Join(dir, runner+".json"), nil
}

// Store is one runner's state file. Safe for concurrent use.
//
// Changes apply to the records in memory at once, in the order they are
// made, and reach the file after: each write puts the latest records
// there, so the file only moves forward and changes made together share
// one file write and fsync. [Store.Put] and [Store.Delete] return once
// the file holds their change; [Store.Begin] returns at once, with the
// write under way.
type Store struct {
	path   string
	relay  string
	runner string

	mu   sync.Mutex
	jobs []Job  // sorted by GitLabID, every change made; guarded by mu
	gen  uint64 // changes made to jobs; guarded by mu

	wmu     sync.Mutex // held while writing the file
	written uint64     // the last change the file holds durably; guarded by wmu
}

// Pending is a change of the state file under way ([Store.Begin]).
type Pending struct {
	done chan struct{}
	err  error
}

// Done is closed once the file durably holds the change (and every
// change made before it), or the write failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Err is the write's error, nil once durable; valid after Done.
func (p *Pending) Err() error { return p.err }

// Wait waits for Done and returns Err.
func (p *Pending) Wait() error {
	<-p.done
	return p.err
}

// Open loads (or starts) runner's state file in dir for the relay relayID.
// A file holding jobs that another relay wrote, or that records no relay,
// fails with ErrRelay (AUTH-16); an empty one is taken over.
func Open(dir, runner, relayID string) (*Store, error) {
	p, err := FileName(dir, runner)
	if err != nil {
		return nil, err
	}
	s := &Store{path: p, relay: relayID, runner: runner}
	f, err := readFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, err
	}
	if len(f.Jobs) > 0 && f.Relay != relayID {
		who := "a vk-gitlab from before relays"
		if f.Relay != "" {
			who = "relay " + f.Relay
		}
		return nil, fmt.Errorf("%w: %s holds %d job(s) of %s, and this daemon is enrolled as relay %s; "+
			"let the old daemon finish them, or remove the file to leave them to GitLab's timeout",
			ErrRelay, p, len(f.Jobs), who, relayID)
	}
	s.jobs = f.Jobs
	sort.Slice(s.jobs, func(i, j int) bool { return s.jobs[i].GitLabID < s.jobs[j].GitLabID })
	return s, nil
}

func readFile(p string) (file, error) {
	var f file
	b, err := os.ReadFile(p)
	if err != nil {
		return f, err
	}
	if err := decodeFile(b, &f); err != nil {
		return f, fmt.Errorf("%w: %s: %w", ErrFormat, p, err)
	}
	return f, nil
}

// decodeFile decodes a state file's content strictly (unknown fields and
// trailing data refused, every job needs an ID, a token and a phase).
// The fuzz target feeds it arbitrary bytes.
func decodeFile(b []byte, v *file) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	if v.Version != FileVersion {
		return fmt.Errorf("version %d, want %d", v.Version, FileVersion)
	}
	seen := map[int64]bool{}
	for _, j := range v.Jobs {
		if j.GitLabID <= 0 || j.Token == "" || j.Phase == "" {
			return fmt.Errorf("job %d: id, token and phase are required", j.GitLabID)
		}
		if seen[j.GitLabID] {
			return fmt.Errorf("job %d recorded twice", j.GitLabID)
		}
		seen[j.GitLabID] = true
	}
	return nil
}

// Path returns the state file's path.
func (s *Store) Path() string { return s.path }

// Jobs returns a copy of the recorded jobs, by GitLab job ID.
func (s *Store) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jobs)
}

// Len returns how many jobs are recorded.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

// Put records j (replacing the record of the same GitLab job) and returns
// once the file is durably written.
func (s *Store) Put(j Job) error {
	if err := checkJob(j); err != nil {
		return err
	}
	return s.flush(s.put(j))
}

// Begin records j as Put does but returns at once, the file's write
// under way: the returned Pending says when it is durable. A change made
// after Begin returned reaches the file after it (or with it), never
// before.
func (s *Store) Begin(j Job) *Pending {
	p := &Pending{done: make(chan struct{})}
	if p.err = checkJob(j); p.err != nil {
		close(p.done)
		return p
	}
	gen := s.put(j)
	go func() {
		p.err = s.flush(gen)
		close(p.done)
	}()
	return p
}

func checkJob(j Job) error {
	if j.GitLabID <= 0 || j.Token == "" || j.Phase == "" {
		return fmt.Errorf("state: job %d: id, token and phase are required", j.GitLabID)
	}
	return nil
}

// put applies j to the records in memory and returns the change's number.
func (s *Store) put(j Job) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs := slices.Clone(s.jobs)
	i, found := slices.BinarySearchFunc(jobs, j.GitLabID, func(e Job, id int64) int { return cmp.Compare(e.GitLabID, id) })
	if found {
		jobs[i] = j
	} else {
		jobs = slices.Insert(jobs, i, j)
	}
	s.jobs = jobs
	s.gen++
	return s.gen
}

// Delete removes GitLab job id's record (RELAY-08); removing an unknown one
// is not an error.
func (s *Store) Delete(id int64) error {
	s.mu.Lock()
	i := slices.IndexFunc(s.jobs, func(e Job) bool { return e.GitLabID == id })
	if i < 0 {
		s.mu.Unlock()
		return nil
	}
	s.jobs = slices.Delete(slices.Clone(s.jobs), i, i+1)
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	return s.flush(gen)
}

// flush returns once the file durably holds change gen: at once if a
// write since made it so, else after writing the latest records (which
// also carries every change made meanwhile). A failed write is tried
// again by the next flush; the records in memory keep the change.
func (s *Store) flush(gen uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.written >= gen {
		return nil
	}
	s.mu.Lock()
	jobs, latest := s.jobs, s.gen
	s.mu.Unlock()
	if err := s.write(jobs); err != nil {
		return err
	}
	s.written = latest
	return nil
}

// write writes jobs atomically (temp file, fsync, rename, fsync dir).
func (s *Store) write(jobs []Job) error {
	if jobs == nil {
		jobs = []Job{}
	}
	b, err := json.MarshalIndent(file{Version: FileVersion, Relay: s.relay, Runner: s.runner, Jobs: jobs}, "", "  ")
	if err != nil {
		return fmt.Errorf("state: encode: %w", err)
	}
	return WriteAtomic(s.path, append(b, '\n'))
}

// WriteAtomic writes data to path mode 0600 atomically: a temporary file in
// the same directory is written and fsynced, renamed over path, and the
// directory fsynced.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("state: write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("state: fsync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("state: fsync %s: %w", dir, err)
	}
	return nil
}

// Orphans returns the state files in dir that no runner of runners owns
// (RELAY-04), as base names, sorted. The daemon warns about them at start.
func Orphans(dir string, runners []string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	owned := map[string]bool{}
	for _, r := range runners {
		owned[r+".json"] = true
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") && !owned[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Busy reports whether any state file in dir records a job (AUTH-10): nil
// when none does (or dir does not exist), else an error naming each file and
// its job count. It is the relay's hubclient.BusyCheck.
func Busy(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	var busy []string
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") {
			continue
		}
		p := filepath.Join(dir, n)
		f, err := readFile(p)
		if err != nil {
			return err
		}
		if len(f.Jobs) > 0 {
			busy = append(busy, fmt.Sprintf("%d job(s) in %s", len(f.Jobs), p))
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("state: %s", strings.Join(busy, "; "))
	}
	return nil
}

// SystemIDFile is the file under the state directory holding the daemon's
// system_id (GL-02).
const SystemIDFile = "system_id"

// SystemID returns the daemon's system_id, persisted in <dir>/system_id
// (GL-02): read when present, else created as gitlab-runner makes one, "s_"
// and 12 lower-case hex digits.
func SystemID(dir string) (string, error) {
	p := filepath.Join(dir, SystemIDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("state: %w", err)
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("state: %w", err)
	}
	id := "s_" + hex.EncodeToString(r[:])
	if err := WriteAtomic(p, []byte(id+"\n")); err != nil {
		return "", err
	}
	return id, nil
}
