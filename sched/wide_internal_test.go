package sched

import (
	"testing"
	"time"
)

// spec: BS-23, BS-24
//
// TestExpectedLeft: a job's expected remaining time comes from the wall
// times of its name: the mean before it runs, the mean of the longer runs
// minus what it ran once running, as long again once it outran them all;
// nothing without statistics (the caller then falls back, BS-24).
func TestExpectedLeft(t *testing.T) {
	c := New(Policy{}, 1)
	for _, w := range []time.Duration{5 * time.Minute, 6 * time.Minute, 90 * time.Second, 30 * time.Hour} {
		c.noteRuntime("x", w, nil)
	}
	s := c.RuntimeStats("x")
	tests := []struct {
		name string
		s    RuntimeStat
		ran  time.Duration
		want time.Duration
	}{
		{"no statistics", RuntimeStat{}, time.Minute, 0},
		{"not running: the mean", s, 0, (5*time.Minute + 6*time.Minute + 90*time.Second + 30*time.Hour) / 4},
		// runs longer than 2m: 5m and 6m (bucket [4m,8m), middle 6m) and 30h
		// (open bucket, at the longest): mean (6m+6m+30h)/3, minus 2m
		{"running 2m", s, 2 * time.Minute, (6*time.Minute+6*time.Minute+30*time.Hour)/3 - 2*time.Minute},
		// past the 6m runs only the 30h one is longer
		{"running 20m", s, 20 * time.Minute, 30*time.Hour - 20*time.Minute},
		// past every run: as long again as it ran
		{"running 40h", s, 40 * time.Hour, 40 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expectedLeft(&tt.s, tt.ran); got != tt.want {
				t.Errorf("expectedLeft(%v) = %v, want %v", tt.ran, got, tt.want)
			}
		})
	}
	if all := c.allStats; all.Count != 4 || all.Longest != 30*time.Hour {
		t.Errorf("all-names statistics = %+v, want 4 runs, longest 30h", all)
	}
}
