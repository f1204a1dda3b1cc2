// Package procstat reads a Linux process's CPU time and memory from
// /proc: what the load generator reports of the hub it started and what
// the microVM backend reports of a job's QEMU.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is a process's CPU time and memory.
type Usage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// RSS is the resident set now, in bytes.
	RSS int64
	// MaxRSS is the peak resident set (VmHWM), in bytes.
	MaxRSS int64
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture vk runs on.
const clockTick = time.Second / 100

// Read reads pid's usage from /proc/<pid>/stat and /proc/<pid>/status.
// It fails when the process is gone or /proc cannot be read; a field
// the kernel does not show stays zero.
func Read(pid int) (Usage, error) {
	var u Usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	u.CPU = parseStat(string(b))
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	u.RSS, u.MaxRSS = parseStatus(string(st))
	return u, nil
}

// parseStat is utime + stime of a stat line. The command name in field 2
// may hold spaces and parentheses, so fields are counted after its last
// closing parenthesis: utime and stime are fields 14 and 15.
func parseStat(s string) time.Duration {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// parseStatus is VmRSS and VmHWM of a status file, in bytes.
func parseStatus(s string) (rss, hwm int64) {
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}
