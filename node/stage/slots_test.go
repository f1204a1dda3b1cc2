package stage

import "testing"

// Slots are gitlab-runner's: the smallest index free among the runner's
// running jobs, and among those of the same project; freed when a job ends.
//
// spec: STAGE-05
func TestConcurrencySlots(t *testing.T) {
	var s slots
	type got struct{ id, pid int }
	take := func(runner string, project int64) (got, func()) {
		id, pid, rel := s.acquire(runner, project)
		return got{id, pid}, rel
	}
	a, relA := take("r1", 1)
	b, _ := take("r1", 1)
	c, _ := take("r1", 2)
	d, _ := take("r2", 1)
	for _, tc := range []struct {
		name      string
		got, want got
	}{
		{"first job", a, got{0, 0}},
		{"same project", b, got{1, 1}},
		{"other project", c, got{2, 0}},
		{"other runner", d, got{0, 0}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: slots %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	relA()
	relA() // idempotent
	if e, _ := take("r1", 1); e != (got{0, 0}) {
		t.Errorf("after the first job ended: slots %v, want {0 0}", e)
	}
	if f, _ := take("r1", 1); f != (got{3, 2}) {
		t.Errorf("next job: slots %v, want {3 2}", f)
	}
}
