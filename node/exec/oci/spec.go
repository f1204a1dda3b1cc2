package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// The subset of the OCI runtime spec (1.0.2) that vk writes. Written by
// hand: the runtime-spec module is not a dependency of vk.

type rtSpec struct {
	OCIVersion string    `json:"ociVersion"`
	Process    rtProcess `json:"process"`
	Root       rtRoot    `json:"root"`
	Hostname   string    `json:"hostname,omitempty"`
	Mounts     []rtMount `json:"mounts"`
	Linux      rtLinux   `json:"linux"`
}

type rtProcess struct {
	Terminal        bool       `json:"terminal"`
	User            rtUser     `json:"user"`
	Args            []string   `json:"args"`
	Env             []string   `json:"env"`
	Cwd             string     `json:"cwd"`
	Capabilities    *rtCaps    `json:"capabilities,omitempty"`
	Rlimits         []rtRlimit `json:"rlimits,omitempty"`
	NoNewPrivileges bool       `json:"noNewPrivileges"`
}

type rtUser struct {
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
}

type rtCaps struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Permitted   []string `json:"permitted"`
	Inheritable []string `json:"inheritable"`
}

type rtRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type rtRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type rtMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

type rtLinux struct {
	Namespaces    []rtNamespace `json:"namespaces"`
	CgroupsPath   string        `json:"cgroupsPath"`
	Resources     rtResources   `json:"resources"`
	MaskedPaths   []string      `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string      `json:"readonlyPaths,omitempty"`
}

type rtNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type rtResources struct {
	Devices []rtDevice `json:"devices"`
}

type rtDevice struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access"`
}

// defaultCaps is Docker's default capability set: CI jobs running as root
// in their image expect to chown, bind low ports, ping, and so on.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// bindMount is a host path mounted into a container.
type bindMount struct {
	Host, Guest string
	ReadOnly    bool
}

// containerSpec is what varies between the job's and a service's
// container.
type containerSpec struct {
	Rootfs     string
	Hostname   string
	Args       []string
	Env        []string
	Cwd        string
	UID, GID   uint32
	Groups     []uint32
	CgroupPath string // absolute, from the cgroup root
	NetNSPath  string // "" makes a new network namespace
	Binds      []bindMount
}

func (c containerSpec) build() rtSpec {
	caps := append([]string(nil), defaultCaps...)
	cwd := c.Cwd
	if cwd == "" {
		cwd = "/"
	}
	s := rtSpec{
		OCIVersion: "1.0.2",
		Process: rtProcess{
			User:            rtUser{UID: c.UID, GID: c.GID, AdditionalGids: c.Groups},
			Args:            c.Args,
			Env:             c.Env,
			Cwd:             cwd,
			Capabilities:    &rtCaps{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps},
			NoNewPrivileges: false, // setuid tools (sudo, su) work as under Docker
		},
		Root:     rtRoot{Path: c.Rootfs},
		Hostname: c.Hostname,
		Mounts: []rtMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: rtLinux{
			Namespaces: []rtNamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
				{Type: "network", Path: c.NetNSPath},
			},
			CgroupsPath: c.CgroupPath,
			Resources:   rtResources{Devices: []rtDevice{{Allow: false, Access: "rwm"}}},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
	for _, b := range c.Binds {
		opts := []string{"rbind", "rprivate"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		}
		s.Mounts = append(s.Mounts, rtMount{Destination: b.Guest, Type: "bind", Source: b.Host, Options: opts})
	}
	return s
}

// writeBundle writes dir/config.json for c.
func writeBundle(dir string, c containerSpec) error {
	b, err := json.MarshalIndent(c.build(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}
