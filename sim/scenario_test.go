package sim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// FuzzParseScenario feeds arbitrary bytes to the scenario decoder (a file
// from the user, untrusted): it must return a scenario or an error wrapping
// ErrScenario, never panic; a parsed scenario samples without panicking.
func FuzzParseScenario(f *testing.F) {
	files, _ := filepath.Glob("scenarios/*.toml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`duration = "1m"` + "\n[[nodes]]\ncount=1\ncpus=1\nmem_gib=1\n"))
	f.Add([]byte("duration = 5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseScenario(b)
		if err != nil {
			if !errorsIs(err, ErrScenario) {
				t.Fatalf("error %v does not wrap ErrScenario", err)
			}
			return
		}
		if s.Duration.Duration > time.Hour {
			s.Duration.Duration = time.Hour // keep the fuzzer fast
		}
		for i := range s.Jobs {
			// keep the fuzzed workload small: the decoder is the target
			j := &s.Jobs[i]
			j.PerHour = min(j.PerHour, 1000)
			for k := range j.Bursts {
				j.Bursts[k].Jobs = min(j.Bursts[k].Jobs, 100)
			}
			if j.Pushes != nil {
				j.Pushes.Fanout = min(j.Pushes.Fanout, 100)
				j.Pushes.PerHour = min(j.Pushes.PerHour, 100)
				if j.Pushes.Every.Duration > 0 {
					j.Pushes.Every.Duration = max(j.Pushes.Every.Duration, time.Minute)
				}
			}
		}
		for _, j := range Sample(s, 1) {
			if j.Arrive < 0 || j.Arrive >= s.Duration.Duration || j.Runtime < time.Millisecond {
				t.Fatalf("bad job %+v", j)
			}
		}
	})
}

func genDist() *rapid.Generator[Dist] {
	return rapid.Custom(func(t *rapid.T) Dist {
		ms := func(label string) Duration {
			return Duration{time.Duration(rapid.Int64Range(1, 3_600_000).Draw(t, label)) * time.Millisecond}
		}
		d := Dist{Kind: rapid.SampledFrom([]string{"fixed", "shifted-exp", "lognormal", "empirical"}).Draw(t, "kind")}
		switch d.Kind {
		case "fixed":
			d.Value = ms("value")
		case "shifted-exp":
			d.Shift, d.Mean = ms("shift"), ms("mean")
		case "lognormal":
			d.Median, d.Sigma = ms("median"), rapid.Float64Range(0, 2).Draw(t, "sigma")
		case "empirical":
			n := rapid.IntRange(2, 6).Draw(t, "n")
			d.Quantiles = []float64{0}
			for i := 1; i < n-1; i++ {
				d.Quantiles = append(d.Quantiles, float64(i)/float64(n-1))
			}
			d.Quantiles = append(d.Quantiles, 1)
			var vs []time.Duration
			for range n {
				vs = append(vs, ms("v").Duration)
			}
			slices.Sort(vs)
			for _, v := range vs {
				d.Values = append(d.Values, Duration{v})
			}
		}
		if rapid.Bool().Draw(t, "clip") {
			d.Max = ms("max")
		}
		return d
	})
}

// Samples of any valid distribution are at least 1 ms, never above Max,
// within the empirical CDF's range, and the same for the same PRNG seed.
//
// spec: BS-18
func TestDistProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := genDist().Draw(t, "dist")
		if err := d.validate(); err != nil {
			t.Fatalf("generated an invalid dist: %v", err)
		}
		seed := rapid.Uint64().Draw(t, "seed")
		a, b := seedFor(seed, "x", 0), seedFor(seed, "x", 0)
		for range 50 {
			x, y := d.Sample(a), d.Sample(b)
			if x != y {
				t.Fatalf("same seed, %s vs %s", x, y)
			}
			if x < time.Millisecond || (d.Max.Duration > 0 && x > max(d.Max.Duration, time.Millisecond)) {
				t.Fatalf("sample %s out of range (max %s)", x, d.Max.Duration)
			}
			if d.Kind == "empirical" && d.Max.Duration == 0 && (x < min(d.Values[0].Duration, time.Millisecond) && x != time.Millisecond || x > max(d.Values[len(d.Values)-1].Duration, time.Millisecond)) {
				t.Fatalf("empirical sample %s outside [%s, %s]", x, d.Values[0].Duration, d.Values[len(d.Values)-1].Duration)
			}
		}
	})
}

// A sampled workload is sorted by arrival, inside the window, numbered
// 0..n-1, honours each template's count, and is a pure function of the
// seed.
//
// spec: BS-18
func TestSampleProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := &Scenario{Duration: Duration{time.Duration(rapid.IntRange(1, 180).Draw(t, "mins")) * time.Minute},
			Tenants: []TenantSpec{{Name: "a", Weight: 1}}}
		nt := rapid.IntRange(1, 4).Draw(t, "templates")
		for i := range nt {
			j := JobTemplate{Name: itoa(i), Tenant: "a", CPUs: 1, MemGiB: 1, DiskGiB: 1,
				PerHour: rapid.Float64Range(0, 600).Draw(t, "rate"), Count: rapid.IntRange(0, 300).Draw(t, "count"),
				Runtime: genDist().Draw(t, "rt")}
			if rapid.Bool().Draw(t, "burst") {
				j.Bursts = []Burst{{At: Duration{time.Duration(rapid.IntRange(0, 200).Draw(t, "at")) * time.Minute}, Jobs: rapid.IntRange(1, 50).Draw(t, "n")}}
			}
			if rapid.Bool().Draw(t, "push") {
				j.Pushes = &Pushes{PerHour: rapid.Float64Range(0.1, 20).Draw(t, "pph"), Fanout: rapid.IntRange(1, 20).Draw(t, "fan")}
			}
			s.Jobs = append(s.Jobs, j)
		}
		seed := rapid.Uint64().Draw(t, "seed")
		jobs := Sample(s, seed)
		per := make([]int, nt)
		for i, j := range jobs {
			if j.ID != i || j.Arrive < 0 || j.Arrive >= s.Duration.Duration || (i > 0 && j.Arrive < jobs[i-1].Arrive) {
				t.Fatalf("job %d: %+v", i, j)
			}
			per[j.Template]++
		}
		for i, n := range per {
			if c := s.Jobs[i].Count; c > 0 && n > c {
				t.Fatalf("template %d: %d jobs, count %d", i, n, c)
			}
		}
		if again := Sample(s, seed); !slices.Equal(jobs, again) {
			t.Fatal("same seed, different workload")
		}
	})
}

// The event heap runs events in (time, sequence) order whatever order they
// were scheduled in.
func TestEngineOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var e engine
		times := rapid.SliceOfN(rapid.Int64Range(0, 100), 1, 200).Draw(t, "times")
		type rec struct {
			at  time.Duration
			seq int
		}
		var got []rec
		for i, x := range times {
			e.at(time.Duration(x), func() { got = append(got, rec{e.now, i}) })
		}
		if err := e.run(t.Context(), 1<<62, nil); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(times) {
			t.Fatalf("ran %d of %d", len(got), len(times))
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.at > b.at || (a.at == b.at && a.seq > b.seq) {
				t.Fatalf("out of order: %+v before %+v", a, b)
			}
		}
	})
}

// Decoding errors name the line, the column and the key, as the binaries'
// config files do (internal/conffile, go-toml/v2 in strict mode); a file's
// errors name the file.
func TestScenarioErrorsNameLineAndKey(t *testing.T) {
	b, err := os.ReadFile("scenarios/rollout.toml")
	if err != nil {
		t.Fatal(err)
	}
	base := string(b)
	lineNo := func(sub string) int { // 1-based line of sub in base
		i := strings.Index(base, sub)
		if i < 0 {
			t.Fatalf("%q not in the scenario", sub)
		}
		return strings.Count(base[:i], "\n") + 1
	}
	line := func(sub string) string { return itoa(lineNo(sub)) }
	cases := []struct {
		name, text string
		want       []string
	}{
		{"unknown key at the end (in [baseline])", base + "\nbogus = 1\n", []string{"scenario:" + itoa(strings.Count(base, "\n")+2) + ":1:", `unknown key "baseline.bogus"`}},
		{"unknown top-level key", "bogus = 1\n" + base, []string{"scenario:1:1:", `unknown key "bogus"`}},
		{"unknown nested key", strings.Replace(base, "quota_pods = 10", "quota_pods = 10\nquota_pod = 3", 1),
			[]string{"scenario:" + itoa(lineNo("quota_pods = 10")+1) + ":1:", `unknown key "baseline.quota_pod"`}},
		{"wrong type", strings.Replace(base, "quota_pods = 10", `quota_pods = "10"`, 1),
			[]string{"scenario:" + line("quota_pods = 10") + ":", `key "baseline.quota_pods"`}},
		{"bad duration", strings.Replace(base, `drain = "1h"`, `drain = "1x"`, 1),
			[]string{"scenario:" + line(`drain = "1h"`) + ":", `key "drain"`, `unknown unit "x"`}},
		{"duration without unit", strings.Replace(base, `drain = "1h"`, `drain = 3600`, 1), []string{"3600", "no unit", `"3600s"`}},
		{"negative seed", strings.Replace(base, "seed = 1", "seed = -1", 1), []string{`key "seed"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(c.text))
			if err == nil {
				t.Fatal("parsed")
			}
			if !errorsIs(err, ErrScenario) {
				t.Errorf("%v does not wrap ErrScenario", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// a file's errors name the file
	p := filepath.Join(t.TempDir(), "x.toml")
	if err := os.WriteFile(p, []byte(base+"\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadScenario(p); err == nil || !strings.Contains(err.Error(), p+":") {
		t.Errorf("LoadScenario: %v, want the file named", err)
	}
}
