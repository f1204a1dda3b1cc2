package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/proto/dispatch"
)

// IngestReport is report ingest measured on both instances while every
// node sends reports at a fixed total rate (BS-09: about 4,000 reports
// a second per instance). Each report goes to both instances, as a
// node's does; the standby only keeps it in its fleet picture, the
// leader also hands it to its driver. CPU is read from /proc.
type IngestReport struct {
	// Sessions is the node sessions each instance held.
	Sessions int `json:"sessions"`
	// OfferedPerSec is the reports per second the nodes sent (each to
	// both instances); ReportBytes is one report's JSON size.
	OfferedPerSec float64 `json:"offered_per_sec"`
	ReportBytes   int     `json:"report_bytes"`
	WindowSecs    float64 `json:"window_secs"`
	// StandbyPerSec is what the standby counted ingested
	// (vk_hub_standby_reports_total, heartbeats included).
	StandbyPerSec float64 `json:"standby_per_sec"`
	// StandbyCores and LeaderCores are the CPU each process used, in
	// cores (CPU seconds per second of the window).
	StandbyCores float64 `json:"standby_cores"`
	LeaderCores  float64 `json:"leader_cores"`
	// StandbyCPUPerReportUs is the standby's CPU per report ingested;
	// LeaderCPUPerReportUs the leader's per report sent.
	StandbyCPUPerReportUs float64 `json:"standby_cpu_per_report_us"`
	LeaderCPUPerReportUs  float64 `json:"leader_cpu_per_report_us"`
	// StandbyRSS is the standby's resident memory at the end, bytes.
	StandbyRSS int64 `json:"standby_rss"`
}

// ingestLabels pad a report to about the 1 KB BS-09 assumes (4 MB/s at
// 4,000 reports/s); jobs here ask for no label, so placement ignores them.
var ingestLabels = func() []string {
	var l []string
	for i := range 40 {
		l = append(l, fmt.Sprintf("label-%02d=value-of-label-%02d", i, i))
	}
	return l
}()

// measureIngest sends reports from every node at o.IngestRate in total
// for o.IngestWindow and reads what both instances did with them.
func (r *haRun) measureIngest(ctx context.Context, lead, sb *haInstance) (*IngestReport, error) {
	o := r.o
	fmt.Fprintf(o.Progress, "measuring ingest: %d reports/s from %d nodes for %v\n", o.IngestRate, len(r.nodes), o.IngestWindow)
	c, err := r.httpClient()
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	rep := func(n *lightNode) *dispatch.Report {
		return &dispatch.Report{Release: "loadgen", Name: n.id, Pools: []string{Pool}, Executor: "process", Labels: ingestLabels,
			Resources: dispatch.Resources{CPUs: nodeCPUs, Mem: nodeMem, Disk: nodeDisk}}
	}
	size, err := dispatch.Encode(dispatch.Frame{Seq: 1, Msg: rep(r.nodes[0])})
	if err != nil {
		return nil, err
	}
	// A second of warm-up at the rate, then the window. Every tick sends
	// what the rate owes since the start, so a late tick catches up (the
	// rate offered is what this process managed to send, reported).
	const tick = 10 * time.Millisecond
	next, start := 0, time.Now()
	send := func() {
		owed := int(time.Since(start).Seconds() * float64(o.IngestRate))
		for ; next < owed; next++ {
			n := r.nodes[next%len(r.nodes)]
			n.sess.Send(rep(n))
		}
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	run := func(d time.Duration) error {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tk.C:
				send()
			}
		}
		return nil
	}
	if err := run(time.Second); err != nil {
		return nil, err
	}
	n0, err := standbyReports(ctx, c, sb.addr)
	if err != nil {
		return nil, err
	}
	sent0, t0 := next, time.Now()
	lu0, su0 := readProc(lead.t.PID), readProc(sb.t.PID)
	if err := run(o.IngestWindow); err != nil {
		return nil, err
	}
	lu1, su1 := readProc(lead.t.PID), readProc(sb.t.PID)
	window := time.Since(t0).Seconds()
	n1, err := standbyReports(ctx, c, sb.addr)
	if err != nil {
		return nil, err
	}
	sent := float64(next - sent0)
	ing := &IngestReport{Sessions: len(r.nodes), OfferedPerSec: sent / window, ReportBytes: len(size), WindowSecs: window,
		StandbyPerSec: (n1 - n0) / window,
		StandbyCores:  (su1.CPU - su0.CPU).Seconds() / window, LeaderCores: (lu1.CPU - lu0.CPU).Seconds() / window,
		StandbyRSS: su1.RSS}
	if n1 > n0 {
		ing.StandbyCPUPerReportUs = float64((su1.CPU - su0.CPU).Microseconds()) / (n1 - n0)
	}
	if sent > 0 {
		ing.LeaderCPUPerReportUs = float64((lu1.CPU - lu0.CPU).Microseconds()) / sent
	}
	return ing, nil
}

// standbyReports reads vk_hub_standby_reports_total from addr's /metrics.
func standbyReports(ctx context.Context, c *http.Client, addr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "vk_hub_standby_reports_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("loadgen: %s/metrics has no vk_hub_standby_reports_total", addr)
}
