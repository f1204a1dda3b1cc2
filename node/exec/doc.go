// Package exec is the seam between the stage runner and what actually runs
// a job's scripts: an [Executor] prepares one [Job] environment of a given
// [Size]; the stage runner then runs each generated bash script in it with
// [Job.Run], stops it with [Job.Cancel], reads [Job.Usage] and finally calls
// [Job.Cleanup].
//
// # The seam
//
// The interface is deliberately small so that three backends fit:
//
//   - process (node/exec/process, the default): a per-job directory and
//     process group on the host, confined by cgroups where the host has
//     them; guest paths are host paths.
//   - oci: Prepare pulls the image and creates a container (runc) with the
//     envelope as its cgroup limits and the builds directory bind-mounted;
//     Run is `runc exec` of bash with the script; Cancel signals the exec'd
//     process group inside the container; HostPath maps the bind mount.
//   - microvm: Prepare boots the VM of Size; Run sends the script to the
//     guest agent and streams its stdout/stderr back on two channels; Usage
//     reads the VMM's /proc entries (NODE-15/16); Cleanup stops the VM.
//
// Everything above the seam (stage order, script generation, the trace,
// transfers) is backend-independent. The stage runner never assumes guest
// paths are host paths: it writes files through [Job.HostPath].
//
// # Sizing
//
// [SizeJob] sizes a job from MICROVM_CPUS, MICROVM_MEM and a
// `# vk:hint cpus=N mem=M` line in its script, with the reservation's
// envelope as the default and the node's ceilings as the bound (NODE-09,
// NODE-17). The variables win over the hint, being explicit per-job
// configuration; history-based sizing is left to the ledger (later).
package exec
