package main

import (
	"errors"
	"fmt"
	"io"
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
// image's root hides the initramfs), gives the guest's Ethernet
// interface the address, brings it and lo up, and writes /etc/hosts
// with the names (the aliases scripts reach services by). A guest with
// two interfaces (the job's network and the node's forwarding network of
// net.mode "switch") gets one vk.net=<ip>/<prefix>@<mac> each, the
// interface found by its Ethernet address.

// netModulesList names the modules the init loads for the network.
const netModulesList = "/etc/vk-agent/modules.net"

// guestNet is the network the kernel command line gives the guest.
type guestNet struct {
	ifs   []guestIf // the guest's interfaces; none: no network
	hosts []string  // /etc/hosts lines beyond localhost
}

// guestIf is one interface's address.
type guestIf struct {
	addr *net.IPNet
	mac  string // "": the first interface other than lo
}

// parseNet reads vk.net= and vk.host= from a kernel command line. A
// malformed vk.net is an error; a malformed vk.host is skipped.
func parseNet(cmdline string) (guestNet, error) {
	var g guestNet
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "vk.net="); ok {
			cidr, mac, _ := strings.Cut(v, "@")
			ip, n, err := net.ParseCIDR(cidr)
			if err != nil || ip.To4() == nil {
				return g, fmt.Errorf("vk.net=%s: want an IPv4 address/prefix", v)
			}
			if mac != "" {
				hw, err := net.ParseMAC(mac)
				if err != nil {
					return g, fmt.Errorf("vk.net=%s: %w", v, err)
				}
				mac = hw.String()
			}
			n.IP = ip.To4()
			g.ifs = append(g.ifs, guestIf{addr: n, mac: mac})
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

// configure gives the guest's Ethernet interfaces their addresses and
// brings them and lo up.
func (g guestNet) configure() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := ifUp(fd, "lo"); err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	var errs []error
	for _, gi := range g.ifs {
		errs = append(errs, gi.configure(fd))
	}
	return errors.Join(errs...)
}

func (gi guestIf) configure(fd int) error {
	name, err := ethernet(gi.mac)
	if err != nil {
		return err
	}
	for _, a := range []struct {
		req uint
		v   net.IP
	}{{unix.SIOCSIFADDR, gi.addr.IP}, {unix.SIOCSIFNETMASK, net.IP(gi.addr.Mask)}} {
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

// ethernet waits for the guest's interface with Ethernet address mac,
// or for its first interface other than lo when mac is "".
func ethernet(mac string) (string, error) {
	deadline := time.Now().Add(netWait)
	for {
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if e.Name() == "lo" {
				continue
			}
			addr, _ := os.ReadFile(filepath.Join("/sys/class/net", e.Name(), "address"))
			if mac == "" || strings.TrimSpace(string(addr)) == mac {
				return e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no network interface %s appeared (virtio_net not loaded?)", mac)
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
	if len(g.ifs) == 0 {
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

// relay joins stdin and stdout to the Unix socket path, until both
// directions end: QEMU's user network runs it for each connection a
// guest opens to an address the node forwards (guestfwd), so the node
// serves that connection on a socket in the job's directory.
func relay(path string) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(os.Stdout, c)
		close(done)
	}()
	_, _ = io.Copy(c, os.Stdin)
	_ = c.(*net.UnixConn).CloseWrite()
	<-done
	return nil
}
