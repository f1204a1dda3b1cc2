// Package microvm is the foundation of the microVM executor backend:
// each job in its own QEMU `microvm` guest with its own kernel, every
// stage run in that guest by vk-agent (cmd/vk-agent) over virtio-serial,
// speaking node/exec/vmproto.
//
// # One guest per job
//
// [New] writes the guest's initramfs once: vk-agent as /init, a static
// busybox and a link per applet in /bin (the scripts' shell and tools),
// and the guest kernel's virtio modules, which vk-agent loads before it
// looks for its port. Prepare starts QEMU (-M microvm, -accel kvm or
// tcg, -m and -smp from the job's size, the host's /boot/vmlinuz-*, a
// virtio-serial port on a Unix socket in the job's directory) and waits
// for the agent's hello; [Job.Boot] splits that wait into QEMU up, the
// kernel's own time to init, and agent ready. Every Run is a script in
// that guest under /bin/sh (busybox: the initramfs has no bash), so
// files and processes' effects persist from stage to stage (STAGE-04).
// Cancel signals the script's process group in the guest; Usage is QEMU's
// CPU time and peak resident memory from /proc. Cleanup closes the
// agent's stream — vk-agent powers the guest off — waits for QEMU (5 s,
// then SIGKILL of its process group) and removes the job's directory:
// socket, console log and all.
//
// # Not yet
//
// The node does not select this backend ([executor] backend = "microvm"
// and the auto probe boot are the next step): the stage runner writes the
// checkout and file variables through HostPath, and a guest without a
// shared file system does not see them; they must move through the
// agent's extract first. Images as root file systems, services as VMs,
// network modes, the registry proxy and the leftover sweep are not built.
package microvm
