// Package imageuser resolves the identity an image's processes run as —
// the image's USER or the job's image user, "name", "uid", "name:group"
// or "uid:gid" — against the image's /etc/passwd and /etc/group, as
// Docker does. The container and microVM backends share it.
package imageuser

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// User is the identity an image's processes run as.
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups from /etc/group
	Home     string
}

// Resolve reads spec ("", "name", "uid", "name:group", "uid:gid") as
// Docker does against the rootfs's /etc/passwd and /etc/group (SPEC-14:
// image.user overrides the image's USER). "" is root. A numeric uid absent
// from /etc/passwd is allowed (gid 0 unless given, home "/"); an unknown
// name is an error. The files are read through an [os.Root], so symlinks
// cannot reach the host.
func Resolve(rootfs, spec string) (User, error) {
	u := User{Home: "/root"}
	spec = strings.TrimSpace(spec)
	if spec == "" {
		spec = "0"
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	passwd := readRootFile(rootfs, "etc/passwd")
	group := readRootFile(rootfs, "etc/group")

	var name string
	if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		u.UID = uint32(n)
		u.Home = "/"
		if u.UID == 0 {
			u.Home = "/root"
		}
		for _, f := range colonRecords(passwd, 7) {
			if f[2] == userPart {
				name, u.Home = f[0], f[5]
				if g, err := strconv.ParseUint(f[3], 10, 32); err == nil {
					u.GID = uint32(g)
				}
				break
			}
		}
	} else {
		found := false
		for _, f := range colonRecords(passwd, 7) {
			if f[0] == userPart {
				uid, err1 := strconv.ParseUint(f[2], 10, 32)
				gid, err2 := strconv.ParseUint(f[3], 10, 32)
				if err1 != nil || err2 != nil {
					return u, fmt.Errorf("user %q: bad /etc/passwd entry", userPart)
				}
				u.UID, u.GID, u.Home, name, found = uint32(uid), uint32(gid), f[5], f[0], true
				break
			}
		}
		if !found {
			return u, fmt.Errorf("unable to find user %s: no matching entries in passwd file", userPart)
		}
	}
	if hasGroup {
		if g, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			u.GID = uint32(g)
		} else {
			found := false
			for _, f := range colonRecords(group, 4) {
				if f[0] == groupPart {
					g, err := strconv.ParseUint(f[2], 10, 32)
					if err != nil {
						return u, fmt.Errorf("group %q: bad /etc/group entry", groupPart)
					}
					u.GID, found = uint32(g), true
					break
				}
			}
			if !found {
				return u, fmt.Errorf("unable to find group %s: no matching entries in group file", groupPart)
			}
		}
	} else if name != "" {
		for _, f := range colonRecords(group, 4) {
			for m := range strings.SplitSeq(f[3], ",") {
				if m == name {
					if g, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(g) != u.GID {
						u.Groups = append(u.Groups, uint32(g))
					}
				}
			}
		}
	}
	if u.Home == "" {
		u.Home = "/"
	}
	return u, nil
}

func readRootFile(rootfs, name string) []byte {
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(io.LimitReader(f, 1<<20))
	return buf.Bytes()
}

// colonRecords splits a passwd/group file into records of n fields,
// skipping comments and malformed lines.
func colonRecords(b []byte, n int) [][]string {
	var out [][]string
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < n {
			continue
		}
		out = append(out, f)
	}
	return out
}
