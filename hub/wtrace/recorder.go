package wtrace

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/sched"
)

// Config is the hub's [trace] table (docs/hub.md). Zero fields take the
// defaults below.
type Config struct {
	// Disabled turns the trace off. Default false: the hub records.
	Disabled bool `toml:"disabled"`
	// Dir holds the trace files; default <state_dir>/trace.
	Dir string `toml:"dir"`
	// MaxBytes bounds the trace files together; the oldest go first.
	// Default 512 MiB.
	MaxBytes int64 `toml:"max_bytes"`
	// MaxAgeHours: a file whose records all are older is deleted. Default
	// 72 (three days: a dry run replays the last 24 h).
	MaxAgeHours int `toml:"max_age_hours"`
	// FileBytes and RotateMins start a new file when the current one
	// reaches this size or age. Defaults 32 MiB and 60.
	FileBytes  int64 `toml:"file_bytes"`
	RotateMins int   `toml:"rotate_mins"`
	// Buffer is how many records wait for the writer; when it is full a
	// record is dropped and counted, never waited for. Default 16384.
	Buffer int `toml:"buffer"`
}

// Defaults of [Config].
const (
	DefaultMaxBytes    = 512 << 20
	DefaultMaxAgeHours = 72
	DefaultFileBytes   = 32 << 20
	DefaultRotateMins  = 60
	DefaultBuffer      = 16384
)

// WithDefaults fills zero fields; stateDir is the hub's state directory.
func (c Config) WithDefaults(stateDir string) Config {
	if c.Dir == "" {
		c.Dir = filepath.Join(stateDir, "trace")
	}
	c.MaxBytes = or(c.MaxBytes, DefaultMaxBytes)
	c.MaxAgeHours = or(c.MaxAgeHours, DefaultMaxAgeHours)
	c.FileBytes = or(c.FileBytes, DefaultFileBytes)
	c.RotateMins = or(c.RotateMins, DefaultRotateMins)
	c.Buffer = or(c.Buffer, DefaultBuffer)
	return c
}

// Validate reports negative values.
func (c Config) Validate() error {
	if c.MaxBytes < 0 || c.MaxAgeHours < 0 || c.FileBytes < 0 || c.RotateMins < 0 || c.Buffer < 0 {
		return errors.New("trace: max_bytes, max_age_hours, file_bytes, rotate_mins and buffer must not be negative")
	}
	return nil
}

func or[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Recorder turns the core's events and actions into trace records and
// writes them on its own goroutine. [Recorder.Step] runs on the hub's
// decision path: it builds a record and offers it to a buffered channel,
// dropping (and counting) it when the buffer is full; it never waits and
// never touches the disk. A nil *Recorder records nothing.
type Recorder struct {
	cfg     Config
	ch      chan Record
	names   func(sched.TenantID) string
	dropped atomic.Int64
	log     *slog.Logger
	once    sync.Once
	done    chan struct{}
	werr    error // the writer's first error, read after done
}

// Open starts a recorder writing under cfg.Dir (created 0700); cfg must
// have its defaults ([Config.WithDefaults]). names gives tenant names for
// policy records (nil: none); it is called on the caller's goroutine, from
// Step.
func Open(cfg Config, names func(sched.TenantID) string, log *slog.Logger) (*Recorder, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	r := newRecorder(cfg, names, log)
	fw := &files{cfg: cfg, log: r.log}
	go r.write(fw)
	return r, nil
}

// newRecorder is a recorder whose writer is not started (tests start it,
// or leave it stalled).
func newRecorder(cfg Config, names func(sched.TenantID) string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{cfg: cfg, ch: make(chan Record, max(cfg.Buffer, 1)), names: names, log: log, done: make(chan struct{})}
}

// Dropped is how many records were dropped because the buffer was full.
func (r *Recorder) Dropped() int64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// Close stops taking records, writes those buffered and closes the file.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.once.Do(func() { close(r.ch) })
	<-r.done
	return r.werr
}

// Put offers one record to the writer without waiting: a full buffer
// drops it and counts the drop.
func (r *Recorder) Put(rec Record) {
	select {
	case r.ch <- rec:
	default:
		r.dropped.Add(1)
	}
}

// Step records what ev and the actions it produced say about the workload
// ([Translate]).
func (r *Recorder) Step(now time.Time, ev sched.Event, acts []sched.Action) {
	if r == nil {
		return
	}
	Translate(now, ev, acts, r.names, r)
}

// Queue records what GitLab said about its queue when it handed out job
// (of runner): how long the job had been pending and how many pending
// jobs the runner could take then. Like Step it never waits.
func (r *Recorder) Queue(now time.Time, job sched.JobID, runner sched.RunnerID, inQueue time.Duration, size int64) {
	if r == nil {
		return
	}
	r.Put(QueueRecord(now, job, runner, inQueue, size))
}

// QueueRecord is the queue record of job.
func QueueRecord(now time.Time, job sched.JobID, runner sched.RunnerID, inQueue time.Duration, size int64) Record {
	return Record{T: now.UnixMilli(), K: KindQueue, Job: uint64(job), Runner: uint64(runner),
		Queued: max(inQueue.Milliseconds(), 0), Pending: max(size, 0)}
}

// Sink takes translated records.
type Sink interface{ Put(Record) }

// Translate turns one core step — the event and the actions it produced —
// into the trace records it implies (see the package documentation for
// the kinds), handed to sink in order; names gives tenant names for
// policy records (nil: none). It is cheap for the events the trace
// ignores (ticks, polls, heartbeats, renewals). The hub's recorder and
// the simulator (sim/replay) share it, so a simulated trace is what a
// hub would have recorded.
func Translate(now time.Time, ev sched.Event, acts []sched.Action, names func(sched.TenantID) string, r Sink) {
	t := now.UnixMilli()
	switch e := ev.(type) {
	case sched.Tick, sched.TicketPolled, sched.RelayHeartbeat, sched.NodeHeartbeat, sched.RenewRequested, sched.Renewed:
	case sched.TicketQueued:
		r.Put(Record{T: t, K: KindDemand, Ticket: uint64(e.Ticket), Runner: uint64(e.Runner)})
	case sched.Claimed:
		r.Put(Record{T: t, K: KindAsk, Adm: uint64(e.Admission)})
	case sched.Outcome:
		r.Put(Record{T: t, K: KindAnswer, Adm: uint64(e.Admission), OK: e.Kind == sched.OutcomeJob})
	case sched.JobSubmitted:
		r.Put(Record{T: t, K: KindSubmit, Job: uint64(e.Job), Runner: uint64(e.Runner), Adm: uint64(e.Admission), Name: e.Name})
	case sched.JobStartReplied:
		if e.Accepted {
			r.Put(Record{T: t, K: KindStart, Job: uint64(e.Job), Node: uint64(e.Node)})
		}
	case sched.JobFinished:
		r.Put(Record{T: t, K: KindEnd, Job: uint64(e.Job), Wall: e.Wall.Milliseconds(), Reason: "finished"})
	case sched.JobCancelled:
		r.Put(Record{T: t, K: KindEnd, Job: uint64(e.Job), Reason: "cancelled"})
	case sched.NodeReport:
		rec := Record{T: t, K: KindNode, Node: uint64(e.Node), CPUs: e.Capacity.CPUs, Mem: e.Capacity.MemBytes,
			Disk: e.Capacity.DiskBytes, Labels: e.Labels, Conc: e.MaxConcurrency, State: e.State.String()}
		if len(e.Pools) > 0 {
			rec.Pool = e.Pools[0]
		}
		if e.LocalRunner {
			rec.State = "local_runner" // takes no placement
		}
		r.Put(rec)
	case sched.NodeUnreachable:
		r.Put(Record{T: t, K: KindNodeGone, Node: uint64(e.Node), Reason: "unreachable"})
	case sched.NodeLost:
		r.Put(Record{T: t, K: KindNodeGone, Node: uint64(e.Node), Reason: "lost"})
	case sched.RelayInventory:
		for _, ru := range e.Runners {
			env := ru.Placement.Envelope
			r.Put(Record{T: t, K: KindRunner, Runner: uint64(ru.Runner), Tenant: uint64(ru.Tenant), Pool: ru.Placement.Pool,
				Labels: ru.Placement.Labels, CPUs: env.CPUs, Mem: env.MemBytes, Disk: env.DiskBytes, Conc: ru.RequestConcurrency})
		}
	case sched.PolicyChanged:
		r.Put(Record{T: t, K: KindPolicy, Policy: PolicyOf(e.Policy, names)})
	}
	for _, a := range acts {
		switch a := a.(type) {
		case sched.Grant:
			r.Put(Record{T: t, K: KindGrant, Ticket: uint64(a.Ticket), Adm: uint64(a.Admission), Node: uint64(a.Node)})
		case sched.EndJob:
			r.Put(Record{T: t, K: KindEnd, Job: uint64(a.Job), Reason: or2(a.Failure, "failed")})
		}
	}
}

func or2(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// write is the writer goroutine: records to files until the channel closes.
func (r *Recorder) write(fw *files) {
	defer close(r.done)
	var reported int64
	for rec := range r.ch {
		if d := r.dropped.Load(); d > reported {
			r.keep(fw.write(&Record{T: rec.T, K: KindDrop, N: d - reported}))
			reported = d
		}
		r.keep(fw.write(&rec))
		if len(r.ch) == 0 {
			r.keep(fw.flush())
		}
	}
	r.keep(fw.close())
}

// keep notes the writer's first error and logs every one.
func (r *Recorder) keep(err error) {
	if err == nil {
		return
	}
	if r.werr == nil {
		r.werr = err
		r.log.Warn("trace write failed; records are lost until it succeeds", "err", err)
	}
}

// files writes records to rotated files named trace-<start ms>.vktrace
// and keeps them within the age and size limits. Every file starts with
// the latest policy, runners and nodes, so each one replays alone.
type files struct {
	cfg     Config
	log     *slog.Logger
	f       *os.File
	w       *Writer
	start   int64 // ms of the current file's first record
	policy  *Record
	runners map[uint64]Record
	nodes   map[uint64]Record
}

// write writes rec to the current file, first starting a new one when
// the current is full or old.
func (fw *files) write(rec *Record) error {
	if fw.w != nil && (fw.w.Size() >= fw.cfg.FileBytes || rec.T-fw.start >= int64(fw.cfg.RotateMins)*60_000) {
		if err := fw.close(); err != nil {
			return err
		}
	}
	if fw.w == nil {
		if err := fw.open(rec.T); err != nil {
			return err
		}
	}
	fw.remember(rec) // after the head: the record follows it
	return fw.w.Write(rec)
}

// remember keeps the latest state records for the next file's head.
func (fw *files) remember(rec *Record) {
	switch rec.K {
	case KindPolicy:
		c := *rec
		fw.policy = &c
	case KindRunner:
		if fw.runners == nil {
			fw.runners = map[uint64]Record{}
		}
		fw.runners[rec.Runner] = *rec
	case KindNode, KindNodeGone:
		if fw.nodes == nil {
			fw.nodes = map[uint64]Record{}
		}
		if rec.K == KindNodeGone && rec.Reason == "lost" {
			delete(fw.nodes, rec.Node)
		} else {
			fw.nodes[rec.Node] = *rec
		}
	}
}

func (fw *files) open(t int64) error {
	fw.prune(t)
	name := filepath.Join(fw.cfg.Dir, fileName(t))
	for n := t + 1; ; n++ { // two files in one millisecond: the next name
		if _, err := os.Stat(name); err != nil {
			break
		}
		name = filepath.Join(fw.cfg.Dir, fileName(n))
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	w, err := NewWriter(f, Header{Start: t, Source: "hub"})
	if err != nil {
		f.Close()
		return fmt.Errorf("trace: %w", err)
	}
	fw.f, fw.w, fw.start = f, w, t
	// the head: state as of t, so the file replays without its elders
	var head []Record
	if fw.policy != nil {
		head = append(head, *fw.policy)
	}
	head = append(head, sortedRecords(fw.runners)...)
	head = append(head, sortedRecords(fw.nodes)...)
	for i := range head {
		head[i].T = t
		if err := w.Write(&head[i]); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	return nil
}

func sortedRecords(m map[uint64]Record) []Record {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Record, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

func (fw *files) flush() error {
	if fw.w == nil {
		return nil
	}
	return fw.w.Flush()
}

func (fw *files) close() error {
	if fw.w == nil {
		return nil
	}
	err := errors.Join(fw.w.Flush(), fw.f.Close())
	fw.f, fw.w = nil, nil
	return err
}

// prune deletes files past the age limit (a file ends where the next
// begins) and then the oldest while the files together pass MaxBytes,
// before a new file starting at now is opened.
func (fw *files) prune(now int64) {
	list, err := List(fw.cfg.Dir)
	if err != nil {
		fw.log.Warn("trace: listing files", "err", err)
		return
	}
	cut := now - int64(fw.cfg.MaxAgeHours)*3_600_000
	var keep []TraceFile
	var total int64
	for i, f := range list {
		end := now
		if i+1 < len(list) {
			end = list[i+1].Start
		}
		if end < cut {
			fw.remove(f)
			continue
		}
		keep = append(keep, f)
		total += f.Size
	}
	// room for the new file too
	for len(keep) > 0 && total+fw.cfg.FileBytes > fw.cfg.MaxBytes {
		fw.remove(keep[0])
		total -= keep[0].Size
		keep = keep[1:]
	}
}

func (fw *files) remove(f TraceFile) {
	if err := os.Remove(f.Path); err != nil {
		fw.log.Warn("trace: removing an old file", "file", f.Path, "err", err)
	}
}

// TraceFile is one file of a trace directory.
type TraceFile struct {
	Path  string
	Start int64 // ms of its first record, from its name
	Size  int64
}

func fileName(t int64) string { return fmt.Sprintf("trace-%015d.vktrace", t) }

// List returns the trace files of dir, oldest first.
func List(dir string) ([]TraceFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []TraceFile
	for _, e := range ents {
		name := e.Name()
		num, ok := strings.CutPrefix(name, "trace-")
		num, ok2 := strings.CutSuffix(num, ".vktrace")
		if !ok || !ok2 || e.IsDir() {
			continue
		}
		t, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, TraceFile{Path: filepath.Join(dir, name), Start: t, Size: info.Size()})
	}
	slices.SortFunc(out, func(a, b TraceFile) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}
