package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrTrace is wrapped by every error [ParseTrace] returns.
var ErrTrace = errors.New("sim: bad trace")

// MaxTraceRows bounds a trace file.
const MaxTraceRows = 10_000_000

// traceJob is one recorded job: its arrival, its template and its runtime.
type traceJob struct {
	arrive   time.Duration
	template int
	runtime  time.Duration
}

// ParseTrace reads a recorded workload (BS-18: replay production traces)
// for s: CSV with the header `arrive,tenant,job,runtime` and one job per
// row. arrive is the offset from the run's start and runtime the job's wall
// time, each a Go duration ("90s", "1m30s") or plain seconds ("90.5");
// tenant and job name one of s's [[jobs]] templates, whose envelope the job
// takes. Rows need not be sorted. The jobs join those sampled from the
// templates' arrival processes. Errors wrap [ErrTrace].
func ParseTrace(r io.Reader, s *Scenario) error {
	tmpl := map[string]int{}
	for i, j := range s.Jobs {
		tmpl[j.Tenant+"\x00"+j.Name] = i
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 4
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return fmt.Errorf("%w: header: %v", ErrTrace, err)
	}
	if strings.Join(head, ",") != "arrive,tenant,job,runtime" {
		return fmt.Errorf("%w: header must be arrive,tenant,job,runtime", ErrTrace)
	}
	var out []traceJob
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrTrace, err)
		}
		if len(out) >= MaxTraceRows {
			return fmt.Errorf("%w: more than %d rows", ErrTrace, MaxTraceRows)
		}
		at, err := parseTraceDuration(rec[0])
		if err != nil || at < 0 || at >= s.Duration.Duration {
			return fmt.Errorf("%w: line %d: arrive %q must be a duration within [0, %s)", ErrTrace, line, rec[0], s.Duration.Duration)
		}
		ti, ok := tmpl[rec[1]+"\x00"+rec[2]]
		if !ok {
			return fmt.Errorf("%w: line %d: no [[jobs]] %q of tenant %q", ErrTrace, line, rec[2], rec[1])
		}
		rt, err := parseTraceDuration(rec[3])
		if err != nil || rt <= 0 || rt > 1000*time.Hour {
			return fmt.Errorf("%w: line %d: runtime %q must be a duration in (0, 1000h]", ErrTrace, line, rec[3])
		}
		out = append(out, traceJob{arrive: at, template: ti, runtime: rt})
	}
	s.traceJobs = out
	return nil
}

func parseTraceDuration(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= -1e7 && f <= 1e7) {
		return 0, errors.New("bad duration")
	}
	return time.Duration(f * float64(time.Second)), nil
}
