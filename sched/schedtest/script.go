package schedtest

import (
	"slices"
	"sort"
	"strings"

	"github.com/vk-ci/vk/sched"
)

// Script interprets scenario commands against a Harness: each command
// builds one event from its arguments and prints the step's actions, or
// asks the Core a question and prints the answer. The language is
// documented in sched/README.md ("Scenarios") and by each command's usage
// line below.
type Script struct {
	H       *Harness
	pol     sched.Policy
	reports map[sched.NodeID]sched.NodeReport
	inv     map[sched.RelayID]*sched.RelayInventory
}

// NewScript returns a Script around a fresh Harness (empty policy, seed 1)
// that checks the Core's invariants after every step.
func NewScript() *Script {
	s := &Script{H: New(sched.Policy{}, 1),
		reports: map[sched.NodeID]sched.NodeReport{},
		inv:     map[sched.RelayID]*sched.RelayInventory{}}
	s.H.Check = true
	s.pol.Tenants = map[sched.TenantID]sched.TenantPolicy{}
	s.pol.ProductionRunners = map[sched.RunnerID]bool{}
	return s
}

// command is one handler of the scenario language.
type command struct {
	usage string
	run   func(s *Script, c *Cmd) []string
}

// Usage returns every command's usage line, sorted.
func Usage() []string {
	var out []string
	for _, c := range commands {
		out = append(out, c.usage)
	}
	sort.Strings(out)
	return out
}

// Exec runs one command line; at ("file:line") names it in failures. A
// command that does not exist, an argument that does not parse and an
// argument the command does not take all stop the test through t.
func (s *Script) Exec(t Fataler, at, line string) []string {
	t.Helper()
	f := strings.Fields(line)
	skip, cmd, ok := 1, command{}, false
	if len(f) > 1 {
		cmd, ok = commands[f[0]+" "+f[1]]
		skip = 2
	}
	if !ok {
		cmd, ok = commands[f[0]]
		skip = 1
	}
	if !ok {
		t.Fatalf("%s: unknown command %q; commands:\n  %s", at, line, strings.Join(Usage(), "\n  "))
	}
	c := parseCmd(t, at, line, skip)
	c.usage = cmd.usage
	out := cmd.run(s, c)
	c.checkUsed()
	return out
}

func (s *Script) step(ev sched.Event) []string { return render(s.H.Step(ev)) }

// render prints the verdict first, then the other actions sorted.
func render(acts []sched.Action) []string {
	var head, rest []string
	for _, a := range acts {
		if _, ok := a.(sched.Verdict); ok {
			head = append(head, a.String())
		} else {
			rest = append(rest, a.String())
		}
	}
	slices.Sort(rest)
	return append(head, rest...)
}

func (s *Script) resources(c *Cmd) sched.Resources {
	return sched.Resources{MemBytes: c.Size("mem"), DiskBytes: c.Size("disk"), CPUs: int64(c.Int("cpu"))}
}

func (s *Script) placement(c *Cmd) sched.Placement {
	return sched.Placement{Pool: c.Str("pool"), Labels: c.List("labels"), Envelope: s.resources(c)}
}

func (s *Script) relayInv(rl sched.RelayID) *sched.RelayInventory {
	inv := s.inv[rl]
	if inv == nil {
		inv = &sched.RelayInventory{Relay: rl}
		s.inv[rl] = inv
	}
	return inv
}
