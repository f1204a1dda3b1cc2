package exec

import "context"

// GuestTree is implemented by a [Job] whose file system the host cannot
// reach through [Job.HostPath] (the microvm backend: the job tree lives on
// the guest's own disk). The stage runner then keeps the host-side
// transfers on host directories of their own and moves the trees in and
// out through these two calls, which run archiving and extraction in the
// guest (XFER-24):
//
//   - a checkout, a restored cache or downloaded artifacts are written
//     into an empty host directory, then PushTree unpacks its content into
//     guestPath (created if missing; existing files are overwritten, none
//     removed);
//   - before caches are saved and artifacts uploaded, PullTree writes the
//     guest's guestPath, as the job left it, into an empty host directory
//     the transfers then read; with only, just those paths below
//     guestPath (relative to it) and the directories above them, which is
//     all the transfers' patterns can select (fileset.Roots).
//
// Paths in the guest are absolute, as scripts see them. Both calls treat
// what the guest sends as hostile: nothing in the stream is placed
// outside hostDir.
type GuestTree interface {
	PushTree(ctx context.Context, hostDir, guestPath string) error
	PullTree(ctx context.Context, guestPath, hostDir string, only []string) error
	// StagingDir returns a new empty host directory for one transfer,
	// removed by Cleanup if the caller does not remove it first.
	StagingDir(name string) (string, error)
}
