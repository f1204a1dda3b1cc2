package relay

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vk-ci/vk/proto/client"
)

// saturation counts vk_gitlab_request_concurrency_exceeded_total: how
// often a runner's GitLab job requests outstanding reached its
// request_concurrency, every loop then busy asking GitLab, so a job GitLab
// holds for the runner waits for a loop to come free (in the spirit of
// gitlab-runner's gitlab_runner_request_concurrency_exceeded_total, which
// grows at every check while all request slots are taken; here it grows
// once per time the runner reaches its limit). A steadily growing count
// says to raise the runner's request_concurrency.
type saturation struct {
	c      *prometheus.CounterVec // runner
	mu     sync.Mutex
	limits map[string]int  // request_concurrency by runner; set by watch
	at     map[string]bool // runners at their limit at the last look
}

func newSaturation() *saturation {
	return &saturation{at: map[string]bool{}, c: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vk_gitlab_request_concurrency_exceeded_total",
		Help: "Times a runner's outstanding GitLab job requests reached its request_concurrency (every loop busy asking GitLab), by runner.",
	}, []string{"runner"})}
}

func (s *saturation) setLimits(limits map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = limits
	for name := range limits {
		s.c.WithLabelValues(name)
	}
}

// observe looks at the runners' state after a change and counts each
// runner that has just reached its limit.
func (s *saturation) observe(hb client.RelayHeartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range hb.Runners {
		limit := s.limits[r.Name]
		full := limit > 0 && len(r.RequestAdmissions) >= limit
		if full && !s.at[r.Name] {
			s.c.WithLabelValues(r.Name).Inc()
		}
		s.at[r.Name] = full
	}
}

// onChange is the manager's change hook: it updates the saturation count
// (when metrics are served) and asks for a heartbeat.
func (s *Server) onChange() {
	if s.met != nil && s.mgr != nil {
		s.met.sat.observe(s.mgr.Heartbeat())
	}
	s.kick()
}
