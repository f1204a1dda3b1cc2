package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Report is one run's result. Rates are per second of the measured
// window; latencies are in milliseconds.
type Report struct {
	Relays      int `json:"relays"`
	Nodes       int `json:"nodes"`
	Loops       int `json:"loops"`
	OutputBytes int `json:"output_bytes"`
	// ConnPerRequest: the relays' clients opened a connection per request
	// (Options.ConnPerRequest).
	ConnPerRequest bool `json:"conn_per_request"`
	// Window is the measured window's length.
	Window time.Duration `json:"-"`
	// Lifecycles is the number of lifecycles begun and finished in it.
	Lifecycles   int     `json:"lifecycles"`
	PerSec       float64 `json:"lifecycles_per_sec"`
	RequestsEach float64 `json:"requests_per_lifecycle"`
	// Steps holds each step's latency percentiles, in Steps order.
	Steps []StepLatency `json:"steps"`
	// HubCPU is the hub's CPU time (user + system) in the window; zero
	// for a hub not started by this run.
	HubCPU          time.Duration `json:"-"`
	HubCPUPerLifeMs float64       `json:"hub_cpu_ms_per_lifecycle,omitempty"`
	HubRSS          int64         `json:"hub_rss_bytes,omitempty"`
	HubMaxRSS       int64         `json:"hub_max_rss_bytes,omitempty"`
	// GenCPU is the load generator's own CPU time in the window: its
	// relays, nodes and request loops, all in this process.
	GenCPU          time.Duration `json:"-"`
	GenCPUPerLifeMs float64       `json:"generator_cpu_ms_per_lifecycle,omitempty"`
	Floor           Floor         `json:"floor"`
	FloorLifecycles float64       `json:"floor_lifecycles_per_sec"`
	FractionOfFloor float64       `json:"fraction_of_floor"`
	WindowSecs      float64       `json:"window_secs"`
	byStep          map[string][]time.Duration
}

// StepLatency is one client-API step's request count and latencies.
type StepLatency struct {
	Step     string  `json:"step"`
	Requests int     `json:"requests"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// finish derives the rates, percentiles and the floor comparison.
func (r *Report) finish() {
	r.WindowSecs = r.Window.Seconds()
	if r.WindowSecs > 0 {
		r.PerSec = float64(r.Lifecycles) / r.WindowSecs
	}
	total := 0
	r.Steps = r.Steps[:0]
	for _, s := range Steps {
		d := r.byStep[s]
		if len(d) == 0 {
			continue
		}
		total += len(d)
		q := func(p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1e3
		}
		r.Steps = append(r.Steps, StepLatency{Step: s, Requests: len(d), P50Ms: q(0.50), P99Ms: q(0.99)})
	}
	if r.Lifecycles > 0 {
		r.RequestsEach = float64(total) / float64(r.Lifecycles)
		r.HubCPUPerLifeMs = float64(r.HubCPU.Microseconds()) / 1e3 / float64(r.Lifecycles)
		r.GenCPUPerLifeMs = float64(r.GenCPU.Microseconds()) / 1e3 / float64(r.Lifecycles)
	}
	// The floor allows as many lifecycles as the no-op rate of the
	// clients' way of connecting (kept-alive, or resumed per request)
	// divided by the requests a lifecycle makes: what the hub could do if
	// each request cost no more than authenticating it.
	if r.RequestsEach > 0 {
		r.FloorLifecycles = r.Floor.KeptPerSec / r.RequestsEach
		if r.ConnPerRequest {
			r.FloorLifecycles = r.Floor.ResumedPerSec / r.RequestsEach
		}
	}
	if r.FloorLifecycles > 0 {
		r.FractionOfFloor = r.PerSec / r.FloorLifecycles
	}
}

// WriteText writes the report as a table for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	conns := "kept-alive connections"
	if r.ConnPerRequest {
		conns = "a connection per request"
	}
	fmt.Fprintf(w, "vk-bench: %d relays, %d loops, %d nodes, %d B output per job, %s, %.1f s measured\n\n",
		r.Relays, r.Loops, r.Nodes, r.OutputBytes, conns, r.WindowSecs)
	fmt.Fprintf(w, "lifecycles     %d (%.1f/s, %.1f requests each)\n", r.Lifecycles, r.PerSec, r.RequestsEach)
	if r.HubCPUPerLifeMs > 0 {
		fmt.Fprintf(w, "hub CPU        %.2f ms per lifecycle\n", r.HubCPUPerLifeMs)
		fmt.Fprintf(w, "hub memory     %.1f MiB resident, %.1f MiB peak\n", float64(r.HubRSS)/(1<<20), float64(r.HubMaxRSS)/(1<<20))
	}
	if r.GenCPUPerLifeMs > 0 {
		fmt.Fprintf(w, "generator CPU  %.2f ms per lifecycle (this process: relays, nodes, loops)\n", r.GenCPUPerLifeMs)
	}
	fmt.Fprintf(w, "\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "step\trequests\tp50 ms\tp99 ms\t\n")
	for _, s := range r.Steps {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t\n", s.Step, s.Requests, s.P50Ms, s.P99Ms)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nfloor: signed no-op %.0f/s fresh, %.0f/s resumed, %.0f/s kept-alive; bbolt %.0f commits/s\n",
		r.Floor.FreshPerSec, r.Floor.ResumedPerSec, r.Floor.KeptPerSec, r.Floor.CommitsPerSec)
	_, err := fmt.Fprintf(w, "the floor allows %.0f lifecycles/s at %.1f requests each: this run reached %.0f%% of it\n",
		r.FloorLifecycles, r.RequestsEach, 100*r.FractionOfFloor)
	return err
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
