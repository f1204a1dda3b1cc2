// Package oci is the container executor backend: a job's image and its
// services run under the real runc (1.1, cgroup v1 / hybrid hosts), behind
// the [exec.Executor]/[exec.Job] seam. Images come from
// node/exec/oci/imagestore; [Chooser] picks this backend or the process
// backend per job.
//
// # One long-lived container per job
//
// Prepare starts the job container with `runc run -d` and a keeper as its
// main process — the image's entrypoint (or image.entrypoint) followed by
// `/bin/sh -c 'trap "exit 0" TERM; read -r _'`, whose stdin is a pipe the
// node holds — and every script is then a `runc exec` of bash beside it.
// Files, the builds directory and the rootfs's changes therefore persist
// from step to step, as multi-step jobs need. The keeper needs /bin/sh in
// the image (gitlab-runner's Docker executor needs a shell too) and bash
// for the steps; Run fails with [exec.ErrStart] naming what is missing. An
// entrypoint that does not exec its arguments ends the container; Run then
// fails to start with the entrypoint's output (GitLab's advice applies:
// `entrypoint: [""]`).
//
// The keeper does not reap orphans: a process a step leaves behind is
// killed when the step ends (every process of the container but the
// keeper), and its zombie stays until the job ends, counted against
// pids.max. A reaping init bind-mounted from the node would lift this.
//
// # Layout and envelope
//
//	<Root>/<job id>/job/{upper,work,merged}  the job container's overlay rootfs and bundle
//	<Root>/<job id>/svc-N/…                   each service's
//	<Root>/<job id>/builds, tmp, hosts        mounted at /builds, /.vk/tmp, /etc/hosts
//	<CgroupRoot>/<ctrl>/<CgroupParent>/<job id>/{job,svc-N}
//
// The job's cgroup (memory, cpu, cpuacct, pids) carries the envelope —
// memory.limit_in_bytes (and memsw), cpu.cfs_quota_us = CPUs×100 ms per
// 100 ms, pids.max — and runc makes each container's cgroup below it, so
// the job and its services share the envelope, and [Job.Usage] (cpuacct.usage,
// memory.max_usage_in_bytes) counts them together. OOM kills are read from
// memory.oom_control of the job cgroup and its children (v1 counts a kill
// in the victim's own cgroup). The rootfs is an overlay on the image's
// shared read-only rootfs, or a copy ([Config.NoOverlay]) where overlayfs
// cannot be used. Containers run as root in the host's user namespace with
// Docker's default capabilities, as gitlab-runner's Docker executor does
// without userns remapping; image.user / the image's USER choose the
// identity of the scripts (SPEC-14).
//
// # Services
//
// Each service is a sibling container started in the foreground (`runc
// run`, the node's child, so its exit is seen at once) joining the job
// container's network namespace (/proc/<keeper>/ns/net); runc brings up
// lo. The job container's /etc/hosts maps localhost, each service's alias
// and its image-derived names (gitlab-runner's "group__image" and
// "group-image") to 127.0.0.1. A service takes one alias, the first; the
// others are named in a warning (DECISIONS 8). Prepare waits up to
// [Config.ServiceWait] for each service's ports (the job's ports, else the
// image's exposed TCP ports) to accept connections, probing from inside
// the namespace, or watches a service without ports for
// [Config.ServiceGrace]; a service that exits or never listens yields a
// warning worded as gitlab-runner's failed health check ("*** WARNING:
// Service … probably didn't start properly.", "Health check error:",
// "Service container logs:"), returned by [Job.Warnings]. Services get
// the job's (non-file) variables, then their own.
//
// Network: the namespace has only lo. Reaching the outside (a bridge, the
// node's net.mode) is another issue's work.
//
// # gVisor
//
// With [Config.Runtime] runsc the same bundles run under gVisor's runsc
// (platform ptrace by default, network none: the sandbox's own loopback
// only): the job's system calls go to gVisor's user-space kernel, not the
// host's. What differs: the container's processes are not host
// processes, so a step's leftovers and cancels are listed with `runsc ps`
// and signalled with `runsc kill --pid` (PID 1, the keeper, is spared);
// services are refused with [ErrConfig] (no second sandbox can join the
// job's network); an OOM in the job cgroup takes the whole sandbox, so
// the steps after it fail to start; and gVisor's file-permission checks
// on files the node wrote (a checkout before Adopt) are its own.
//
// # Errors the stage runner maps
//
//   - [ErrImagePull] (= imagestore.ErrPull): failure image_pull (FAIL-04).
//   - [ErrConfig]: failure configuration (no image where the node
//     requires one, an unknown image user…).
//   - other Prepare errors wrap [exec.ErrPrepare]: failure system.
//
// All Prepare errors wrap [exec.ErrPrepare]; test the two above first.
//
// # Exit status
//
// runc exec reports a process killed by signal n as 128+n. Run reports
// ExitCode -1 with the signal's name when vk sent the signal (Cancel, ctx)
// or the OOM killer struck during the run; otherwise 128+n is the script's
// own status, as Docker reports it.
package oci
