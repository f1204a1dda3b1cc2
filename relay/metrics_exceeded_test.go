package relay

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vk-ci/vk/proto/client"
)

// The exceeded counter grows once each time a runner's outstanding job
// requests reach its request_concurrency, not while they stay there, and
// again after they fell below it; a runner under its limit, or without a
// known limit, never counts.
func TestRequestConcurrencyExceeded(t *testing.T) {
	s := newSaturation()
	s.setLimits(map[string]int{"big": 2, "one": 1})
	hb := func(big, one, unknown int) client.RelayHeartbeat {
		adm := func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = "a"
			}
			return out
		}
		return client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{
			{Name: "big", RequestAdmissions: adm(big)}, {Name: "one", RequestAdmissions: adm(one)}, {Name: "x", RequestAdmissions: adm(unknown)},
		}}
	}
	for i, step := range []struct {
		big, one, unknown int
		wantBig, wantOne  float64
	}{
		{0, 0, 3, 0, 0},
		{1, 1, 3, 0, 1}, // one reaches its limit of 1
		{2, 1, 3, 1, 1}, // big reaches 2; one stays full: no count
		{2, 1, 3, 1, 1},
		{1, 0, 0, 1, 1},
		{2, 1, 0, 2, 2}, // both full again
	} {
		s.observe(hb(step.big, step.one, step.unknown))
		if got := count(t, s, "big"); got != step.wantBig {
			t.Errorf("step %d: big = %v, want %v", i, got, step.wantBig)
		}
		if got := count(t, s, "one"); got != step.wantOne {
			t.Errorf("step %d: one = %v, want %v", i, got, step.wantOne)
		}
	}
	if got := count(t, s, "x"); got != 0 {
		t.Errorf("runner without a limit counted %v", got)
	}
}

// count reads the counter of runner (0 when it has none).
func count(t *testing.T, s *saturation, runner string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "runner" && l.GetValue() == runner {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
