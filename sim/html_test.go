package sim

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
)

var (
	reChart  = regexp.MustCompile(`(?s)<svg class="chart".*?</svg>\n<p class="lg">.*?</p>`)
	rePath   = regexp.MustCompile(`<path class="series" d="[^"]*" fill="none" stroke="(#[0-9a-f]+)" stroke-width="[0-9.]+"(?: stroke-dasharray="([0-9 ]+)")?/>`)
	reSample = regexp.MustCompile(`<span><svg width="\d+" height="10"><line [^>]*stroke="(#[0-9a-f]+)" stroke-width="2"(?: stroke-dasharray="([0-9 ]+)")?/></svg>`)
	reXTick  = regexp.MustCompile(`<text class="xt"[^>]*>([^<]+)</text>`)
	reYTick  = regexp.MustCompile(`<text class="yt"[^>]*>([^<]+)</text>`)
	reWidth  = regexp.MustCompile(`<svg[^>]* width="(\d+)"`)
)

func htmlOf(t *testing.T, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Every chart of the HTML report has ticks on both axes, one line per
// variant drawn in a colour and dash pattern no other line of the chart
// has, and a legend whose samples are those lines' styles in order; no
// element is drawn wider than a 1400 px window; the goals section is
// there.
func TestHTMLReportCharts(t *testing.T) {
	s := load(t, "push-burst")
	rep := run(t, s, 1, "vk", "quota-margin", "pull-fifo")
	h := htmlOf(t, rep)
	charts := reChart.FindAllString(h, -1)
	// utilization, waits, the margin sweep, a share chart per variant
	if want := 3 + len(rep.Results); len(s.Tenants) > 1 && len(charts) != want || len(charts) < 3 {
		t.Fatalf("%d charts, want %d", len(charts), want)
	}
	for i, c := range charts {
		paths, samples := rePath.FindAllStringSubmatch(c, -1), reSample.FindAllStringSubmatch(c, -1)
		if len(paths) < 2 || len(paths) != len(samples) {
			t.Errorf("chart %d: %d lines, %d legend entries", i, len(paths), len(samples))
			continue
		}
		seen := map[string]bool{}
		for k, p := range paths {
			style := p[1] + "/" + p[2]
			if seen[style] {
				t.Errorf("chart %d: two lines styled %s", i, style)
			}
			seen[style] = true
			if got := samples[k][1] + "/" + samples[k][2]; got != style {
				t.Errorf("chart %d: legend entry %d is %s, its line %s", i, k, got, style)
			}
		}
		if x, y := reXTick.FindAllStringSubmatch(c, -1), reYTick.FindAllStringSubmatch(c, -1); len(x) < 3 || len(y) < 3 {
			t.Errorf("chart %d: %d x ticks, %d y ticks, want ≥ 3 each", i, len(x), len(y))
		}
	}
	for _, m := range reWidth.FindAllStringSubmatch(h, -1) {
		if w, _ := strconv.Atoi(m[1]); w > 1400 {
			t.Errorf("an svg %d px wide", w)
		}
	}
	if !strings.Contains(h, "<h2>Goals</h2>") || !strings.Contains(h, "No goal is set for scenario push-burst") {
		t.Error("the report lacks its goals section")
	}
}

// Ticks fall on round values within the axis: 0 first, never past max.
func TestAxisTicks(t *testing.T) {
	for _, c := range []struct {
		max  float64
		want []string
	}{
		{1, []string{"0%", "20%", "40%", "60%", "80%", "100%"}},
		{0.5, []string{"0%", "10%", "20%", "30%", "40%", "50%"}},
	} {
		var got []string
		for _, tk := range linearAxis(c.max, "", fmtPctTick).ticks {
			got = append(got, tk.text)
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("ticks to %v = %v, want %v", c.max, got, c.want)
		}
	}
	a := linearAxis(180, "", fmtTick)
	if a.ticks[0].text != "0" || a.ticks[len(a.ticks)-1].at > 180 || len(a.ticks) < 4 || len(a.ticks) > 10 {
		t.Errorf("ticks to 180 = %+v", a.ticks)
	}
	l := logAxis(4000, "wait")
	var texts []string
	for _, tk := range l.ticks {
		texts = append(texts, tk.text)
	}
	if got := strings.Join(texts, " "); got != "0.01 s 0.1 s 1 s 10 s 1.7 min 16.7 min" {
		t.Errorf("log ticks to 4000 s = %q", got)
	}
}

// A goal set for the scenario gets a verdict line: met, not met, or not
// judged when a policy it compares with did not run.
func TestHTMLVerdicts(t *testing.T) {
	s := load(t, "push-burst")
	rep := run(t, s, 1, "vk", "pull-fifo")
	util := func(_ *Report, r *Result) float64 { return r.Util }
	ms := []Metric{
		{Scenario: s.Name, Name: "utilization", Goal: "≥ 0%", Met: atLeast(0), Value: util, Format: fmtPct},
		{Scenario: s.Name, Name: "utilization, strictly", Goal: "≥ 200%", Met: atLeast(2), Value: util, Format: fmtPct},
		{Scenario: s.Name, Name: "against greedy", Goal: "> greedy-backfill", Needs: []string{"greedy-backfill"}, Met: above("greedy-backfill"), Value: util, Format: fmtPct},
		{Scenario: "elsewhere", Name: "other", Goal: "0", Met: atMost(0), Value: util, Format: fmtPct},
		{Scenario: s.Name, Name: "shown only", Value: util, Format: fmtPct},
	}
	var b strings.Builder
	writeVerdicts(&b, rep, ms)
	got := b.String()
	for _, want := range []string{
		`<li class="met">✓ met: utilization ≥ 0% — vk `,
		`<li class="unmet">✗ not met: utilization, strictly ≥ 200% — vk `,
		`<li class="unjudged">not judged (needs greedy-backfill): against greedy &gt; greedy-backfill — vk `,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("verdicts lack %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "<li ") != 3 {
		t.Errorf("verdicts, want 3 lines:\n%s", got)
	}
}

// In a real browser 1400 px wide the report does not scroll sideways: the
// page is no wider than the window, and the text tables (every policy's
// row) fit their box whole (Debian's chromium, headless).
func TestHTMLFitsWindow(t *testing.T) {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		need.Missingf(t, "chromium not installed (apt-get install -y chromium): the layout test needs it")
	}
	s := load(t, "push-burst")
	h := htmlOf(t, run(t, s, 1))
	// the test's own probe, after the report: the page's scroll width and
	// how far each text table's content passes its box
	probe := `<script>var o=0;document.querySelectorAll("pre").forEach(function(p){o=Math.max(o,p.scrollWidth-p.clientWidth)});` +
		`document.body.setAttribute("data-pre-overflow",o);` +
		`document.body.setAttribute("data-scroll-width", document.documentElement.scrollWidth)</script>`
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, []byte(strings.Replace(h, "</body>", probe+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--hide-scrollbars", "--window-size=1400,900", "--dump-dom", "file://"+file)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.Bytes())
	}
	m := regexp.MustCompile(`data-scroll-width="(\d+)"`).FindSubmatch(out.Bytes())
	if m == nil {
		t.Fatalf("the probe did not run:\n%.2000s", out.Bytes())
	}
	w, _ := strconv.Atoi(string(m[1]))
	if w > 1400 {
		t.Errorf("the report is %d px wide in a 1400 px window", w)
	}
	p := regexp.MustCompile(`data-pre-overflow="(\d+)"`).FindSubmatch(out.Bytes())
	if p == nil || string(p[1]) != "0" {
		t.Errorf("a text table passes its box by %s px in a 1400 px window", p)
	}
	t.Logf("scroll width %d px in a 1400 px window", w)
}
