package procstat

import (
	"os"
	"testing"
	"time"
)

// A command name with spaces and a parenthesis does not shift the
// fields: utime 250 and stime 50 ticks are 3 s.
func TestParseStat(t *testing.T) {
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"
	if got := parseStat(line); got != 3*time.Second {
		t.Errorf("parseStat = %v, want 3s", got)
	}
	if got := parseStat("garbage"); got != 0 {
		t.Errorf("parseStat(garbage) = %v", got)
	}
}

func TestParseStatus(t *testing.T) {
	rss, hwm := parseStatus("Name:\tx\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n")
	if rss != 1<<20 || hwm != 2<<20 {
		t.Errorf("rss %d, hwm %d; want 1 MiB and 2 MiB", rss, hwm)
	}
}

// This process's own usage reads, and a process that does not exist
// fails.
func TestRead(t *testing.T) {
	u, err := Read(os.Getpid())
	if err != nil || u.RSS <= 0 || u.MaxRSS < u.RSS {
		t.Errorf("Read(self) = %+v, %v", u, err)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Errorf("Read of a pid that does not exist succeeded")
	}
}
