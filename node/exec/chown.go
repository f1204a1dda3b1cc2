package exec

import (
	"io/fs"
	"os"
	"path/filepath"
)

// ChownTree gives root and everything under it to uid:gid, for backends'
// [Job.Adopt]. Symlinks are changed themselves, never followed, so a link
// a job planted cannot hand it a file outside the tree. It stops at the
// first error and returns it.
func ChownTree(root string, uid, gid uint32) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}
