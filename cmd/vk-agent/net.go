package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A job's VMs — the job's and one per service — share a private network
// that the node builds (node/exec/microvm, hub.go). The node names each
// guest's address on the kernel command line, vk.net=<ip>/<prefix>, and
// the names on that network, one vk.host=<ip>,<name>[,<name>…] each; the
// init loads the virtio-net modules listed in netModulesList (before the
// image's root hides the initramfs), gives the guest's one Ethernet
// interface the address, brings it and lo up, and writes /etc/hosts
// with the names (the aliases scripts reach services by).

// netModulesList names the modules the init loads for the network.
const netModulesList = "/etc/vk-agent/modules.net"

// guestNet is the network the kernel command line gives the guest.
type guestNet struct {
	addr  *net.IPNet // the guest's address and prefix; nil: no network
	hosts []string   // /etc/hosts lines beyond localhost
}

// parseNet reads vk.net= and vk.host= from a kernel command line. A
// malformed vk.net is an error; a malformed vk.host is skipped.
func parseNet(cmdline string) (guestNet, error) {
	var g guestNet
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "vk.net="); ok {
			ip, n, err := net.ParseCIDR(v)
			if err != nil || ip.To4() == nil {
				return g, fmt.Errorf("vk.net=%s: want an IPv4 address/prefix", v)
			}
			n.IP = ip.To4()
			g.addr = n
		}
		if v, ok := strings.CutPrefix(f, "vk.host="); ok {
			parts := strings.Split(v, ",")
			if len(parts) < 2 || net.ParseIP(parts[0]) == nil {
				continue
			}
			g.hosts = append(g.hosts, parts[0]+"\t"+strings.Join(parts[1:], " "))
		}
	}
	return g, nil
}

// hostsFile is /etc/hosts for the guest: localhost, then the network's
// names.
func (g guestNet) hostsFile() string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range g.hosts {
		b.WriteString(h + "\n")
	}
	return b.String()
}

// netWait bounds the wait for the Ethernet interface to appear once its
// driver is loaded.
const netWait = 10 * time.Second

// configure gives the guest's Ethernet interface its address and brings
// it and lo up.
func (g guestNet) configure() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := ifUp(fd, "lo"); err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	name, err := ethernet()
	if err != nil {
		return err
	}
	for _, a := range []struct {
		req uint
		v   net.IP
	}{{unix.SIOCSIFADDR, g.addr.IP}, {unix.SIOCSIFNETMASK, net.IP(g.addr.Mask)}} {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(a.v.To4()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, a.req, ifr); err != nil {
			return fmt.Errorf("%s: address %s: %w", name, a.v, err)
		}
	}
	return ifUp(fd, name)
}

// ethernet waits for the guest's first interface other than lo.
func ethernet() (string, error) {
	deadline := time.Now().Add(netWait)
	for {
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if e.Name() != "lo" {
				return e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("no network interface appeared (virtio_net not loaded?)")
		}
		time.Sleep(10 * time.Millisecond) // polling sysfs for a device to appear
	}
}

func ifUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setup brings the guest's network up and writes its /etc/hosts
// (in the root the scripts see: call it after the root moved).
func (g guestNet) setup() {
	if g.addr == nil {
		return
	}
	if err := g.configure(); err != nil {
		fmt.Fprintln(os.Stderr, "vk-agent: network:", err)
	}
	_ = os.MkdirAll("/etc", 0o755)
	if err := os.WriteFile(filepath.Join("/etc", "hosts"), []byte(g.hostsFile()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "vk-agent: /etc/hosts:", err)
	}
}

// waitTCP dials every address until each has accepted a connection once,
// or until wait has passed; it returns the addresses that never did.
// This is the services' health check, run in the job's VM: a service is
// up when the job can connect to its ports.
func waitTCP(addrs []string, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	pending := addrs
	for {
		var still []string
		for _, a := range pending {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				still = append(still, a)
				continue
			}
			c.Close()
		}
		pending = still
		if len(pending) == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(100 * time.Millisecond) // polling a port that may not listen yet
	}
}
