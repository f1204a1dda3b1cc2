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
// files and processes' effects persist from stage to stage (STAGE-04);
// in a job's image, under its bash, through its entrypoint and as its
// USER (image.go).
// Cancel signals the script's process group in the guest; Usage is QEMU's
// CPU time and peak resident memory from /proc. Cleanup closes the
// agent's stream — vk-agent powers the guest off — waits for QEMU (5 s,
// then SIGKILL of its process group) and removes the job's directory:
// socket, console log and all.
//
// # Trees, images, leftovers
//
// A Job is an [exec.GuestTree]: the stage runner's host-side transfers
// write into staging directories that [Job.PushTree] streams into the
// guest through the agent's extract, and read what [Job.PullTree]
// archived there (XFER-24). [Executor.For] binds a job's image: pulled
// into the node's image store, made into an ext4 disk once per image ID
// (image.go), and booted on a per-job qcow2 overlay that the agent as
// init makes the root. [Sweep], run by [New], kills the QEMU of every job
// directory a dead executor left and removes the directories.
//
// # Services and networks
//
// A job's services are VMs beside the job's on a private per-job
// network, an Ethernet hub in the node (services.go, hub.go); under
// net.mode "switch" the job's VM also reaches registry.vk, the job's
// guest registry proxy, and nothing else (switch.go).
//
// # Not yet
//
// vsock, and the node passing net.mode and the job's registry proxy. See docs/node.md, "The microvm backend".
package microvm
