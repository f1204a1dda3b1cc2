package loadgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/hubsession"
)

// relaySession is a relay's session with the hub, as vk-gitlab holds
// it: the hub takes reservations only from a relay whose session is up,
// and a heartbeat names every ticket, claimed grant and job the relay's
// runners hold (anything it leaves out the hub may end).
type relaySession struct {
	name    string
	sess    *hubsession.Client
	runners []string
	ready   chan struct{}
	once    sync.Once

	mu   sync.Mutex
	held map[string]*runnerHeld // by runner
}

// runnerHeld is what one runner holds right now.
type runnerHeld struct {
	ticket    string
	admission string                // a claimed grant waiting for its outcome
	jobs      []client.JobAdmission // submitted, not settled
}

// newRelaySession prepares the session of relay r to t; others are
// further hub instances' base URLs, dialled in turn when the one in use
// cannot be reached.
func newRelaySession(t *Target, r relay, name string, runners []string, others ...string) (*relaySession, error) {
	u, tcfg, err := t.clientTLS()
	if err != nil {
		return nil, err
	}
	s := &relaySession{name: name, runners: runners, ready: make(chan struct{}), held: map[string]*runnerHeld{}}
	for _, rn := range runners {
		s.held[rn] = &runnerHeld{}
	}
	path := strings.TrimPrefix(client.RouteRelaySession, "GET ")
	var urls []string
	for _, o := range others {
		urls = append(urls, "wss://"+strings.TrimPrefix(o, "https://")+path)
	}
	s.sess, err = hubsession.New(hubsession.Config{URL: "wss://" + u.Host + path, Others: urls, RelayID: r.id, Key: r.key,
		TLSConfig: tcfg, Release: "loadgen"}, s)
	return s, err
}

// Connected reports the relay's runners, each placing in Pool with one
// request loop.
func (s *relaySession) Connected(client.RelayWelcome) client.RelayReport {
	rep := client.RelayReport{Release: "loadgen", Host: "loadgen", SystemID: "s_" + s.name, Concurrent: 128,
		GitLabURL: "https://gitlab.invalid"}
	for _, rn := range s.runners {
		rep.Runners = append(rep.Runners, client.RunnerReport{Name: rn, GitLabRunnerID: 1,
			Placement: client.Placement{Pool: Pool, Envelope: jobEnvelope}, RequestConcurrency: 1, TokenAccepted: true})
	}
	s.once.Do(func() { close(s.ready) })
	return rep
}

func (s *relaySession) ServerStatus(*client.ServerStatus) {}
func (s *relaySession) Update(*client.Update)             {}
func (s *relaySession) Disconnected(error)                {}

// Heartbeat names what every runner holds.
func (s *relaySession) Heartbeat() client.RelayHeartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hb client.RelayHeartbeat
	for _, rn := range s.runners {
		h := s.held[rn]
		rh := client.RunnerHeartbeat{Name: rn, State: client.RunnerPolling, JobAdmissions: slices.Clone(h.jobs)}
		if h.ticket != "" {
			rh.Tickets = []string{h.ticket}
			rh.State = client.RunnerWaitingCapacity
		}
		if h.admission != "" {
			rh.RequestAdmissions = []string{h.admission}
		}
		hb.Runners = append(hb.Runners, rh)
	}
	return hb
}

// update changes what runner holds under the session's lock.
func (s *relaySession) update(runner string, f func(*runnerHeld)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.held[runner])
}

// start runs the session until ctx ends and waits for its first welcome.
func (s *relaySession) start(ctx context.Context, wg *sync.WaitGroup) error {
	wg.Go(func() { s.sess.Run(ctx) })
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("loadgen: relay %s: no session welcome within 30 s", s.name)
	}
}
