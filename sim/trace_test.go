package sim

import (
	"strings"
	"testing"
	"time"
)

func traceScenario(t testing.TB) *Scenario {
	s, err := ParseScenario([]byte(`
duration = "1h"
trace = "x.csv"
[[nodes]]
count = 1
cpus = 8
mem_gib = 32
[[tenants]]
name = "a"
[[jobs]]
name = "build"
tenant = "a"
cpus = 2
mem_gib = 8
runtime = { kind = "fixed", value = "1m" }
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A trace's jobs replay as recorded: their arrival, template and runtime
// reach the workload unchanged, in arrival order.
//
// spec: BS-18
func TestParseTrace(t *testing.T) {
	s := traceScenario(t)
	err := ParseTrace(strings.NewReader("arrive,tenant,job,runtime\n90,a,build,2m30s\n1m,a,build,45.5\n"), s)
	if err != nil {
		t.Fatal(err)
	}
	jobs := Sample(s, 1)
	want := []Job{{ID: 0, Arrive: time.Minute, Runtime: 45500 * time.Millisecond}, {ID: 1, Arrive: 90 * time.Second, Runtime: 150 * time.Second}}
	if len(jobs) != 2 || jobs[0] != want[0] || jobs[1] != want[1] {
		t.Fatalf("jobs %+v, want %+v", jobs, want)
	}
	bad := map[string]string{
		"header":        "at,tenant,job,runtime\n",
		"fields":        "arrive,tenant,job,runtime\n1,a,build\n",
		"template":      "arrive,tenant,job,runtime\n1,a,test,1\n",
		"tenant":        "arrive,tenant,job,runtime\n1,b,build,1\n",
		"past window":   "arrive,tenant,job,runtime\n2h,a,build,1\n",
		"negative":      "arrive,tenant,job,runtime\n-1,a,build,1\n",
		"zero runtime":  "arrive,tenant,job,runtime\n1,a,build,0\n",
		"not a number":  "arrive,tenant,job,runtime\nsoon,a,build,1\n",
		"empty":         "",
		"huge runtime":  "arrive,tenant,job,runtime\n1,a,build,1e300\n",
		"nan":           "arrive,tenant,job,runtime\nNaN,a,build,1\n",
		"bare quote":    "arrive,tenant,job,runtime\n1,\"a,build,1\n",
		"runtime hours": "arrive,tenant,job,runtime\n1,a,build,1001h\n",
	}
	for name, text := range bad {
		if err := ParseTrace(strings.NewReader(text), traceScenario(t)); !errorsIs(err, ErrTrace) {
			t.Errorf("%s: err %v, want ErrTrace", name, err)
		}
	}
}

// FuzzParseTrace feeds arbitrary bytes to the trace decoder (a file from
// the user, untrusted): a trace is accepted or refused with ErrTrace, and
// every accepted job lies within the window with a positive runtime.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte("arrive,tenant,job,runtime\n90,a,build,2m30s\n1m,a,build,45.5\n"))
	f.Add([]byte("arrive,tenant,job,runtime\n"))
	f.Add([]byte("arrive,tenant,job,runtime\n\"1\",a,build,\"1e3\"\n"))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := traceScenario(t)
		if err := ParseTrace(strings.NewReader(string(b)), s); err != nil {
			if !errorsIs(err, ErrTrace) {
				t.Fatalf("error %v does not wrap ErrTrace", err)
			}
			return
		}
		for _, j := range Sample(s, 1) {
			if j.Arrive < 0 || j.Arrive >= time.Hour || j.Runtime <= 0 {
				t.Fatalf("bad job %+v", j)
			}
		}
	})
}
