package oci

import (
	"encoding/json"
	"strconv"
	"syscall"
)

// signalScriptGvisor is signalScript under runsc: the container's
// processes live in gVisor's kernel, not the host's, so they are listed
// with `runsc ps` and signalled with `runsc kill --pid`. The keeper is
// the container's first process, PID 1 in the sandbox.
func (j *Job) signalScriptGvisor(sig syscall.Signal) int {
	out, err := j.e.runcCmd("ps", "--format=json", j.id).Output()
	if err != nil {
		return 0
	}
	var pids []int
	if json.Unmarshal(out, &pids) != nil {
		var procs []struct {
			PID int `json:"PID"`
		}
		if json.Unmarshal(out, &procs) != nil {
			return 0
		}
		for _, p := range procs {
			pids = append(pids, p.PID)
		}
	}
	n := 0
	for _, pid := range pids {
		if pid <= 1 {
			continue
		}
		if j.e.runcCmd("kill", "--pid", strconv.Itoa(pid), j.id, strconv.Itoa(int(sig))).Run() == nil {
			n++
		}
	}
	return n
}
