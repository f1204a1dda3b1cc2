package vmproto

import (
	"bytes"
	"os"
	"strconv"
)

// In a guest the agent is what keeps the job alive, so it runs with the
// OOM killer told to spare it ([ProtectFromOOM]); each script gets the
// default score back, so that running out of memory kills the job's
// processes, which the script's Exit reports as OOMKilled.

// ProtectFromOOM tells the kernel's OOM killer never to pick the calling
// process (oom_score_adj -1000); children inherit it until
// [unprotect]. Only where it is permitted (root); errors are ignored.
func ProtectFromOOM() { _ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0) }

// unprotect gives pid the default OOM score back.
func unprotect(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
}

// oomKills is the kernel's count of OOM kills since boot (/proc/vmstat
// oom_kill), 0 where it cannot be read.
func oomKills() int64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("oom_kill ")); ok {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}
