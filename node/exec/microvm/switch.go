package microvm

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/vk-ci/vk/node/regproxy"
)

// net.mode = "switch" (XFER-18..23): the job's VM gets a second network
// whose only way out is what the node forwards. It is QEMU's user-mode
// network with restrict=on — no route to the host or beyond — and one
// forward, `guestfwd`, of tcp 10.0.3.100:80 (registry.vk in the guest's
// /etc/hosts) to a command QEMU runs per connection: vk-agent -relay,
// joining that connection to a Unix socket in the job's directory where
// the node serves the job's guest registry proxy (node/regproxy: the
// job's token injected, never the node's credential; a refusing proxy
// for a job without one). The steps get VK_REGISTRY and
// VK_REGISTRY_NAMESPACES; under any other mode the VM has no such
// network and the steps neither variable (XFER-23).

// The forwarding network's addresses.
const (
	fwdNet       = "10.0.3.0/24"
	fwdHost      = "10.0.3.2" // QEMU's side; unreachable under restrict=on
	fwdGuest     = "10.0.3.15"
	registryAddr = "10.0.3.100"
	fwdMACHost   = 0xfe
)

// forwarder serves what the node forwards to one job's VM.
type forwarder struct {
	sock string
	ln   net.Listener
	srv  *http.Server
}

// switchEnv is the steps' registry variables for spec's network mode:
// none unless net.mode is "switch" (XFER-23).
func switchEnv(spec Spec) []string {
	if !regproxy.Enabled(spec.NetMode) {
		return nil
	}
	return regproxy.Env(spec.RegistryNamespaces)
}

// startForwarder serves the job's registry proxy on a socket in its
// directory; a job without a proxy gets one refusing everything.
func (e *Executor) startForwarder(j *Job, spec Spec) error {
	h := spec.Registry
	if h == nil {
		h = regproxy.Refusing(nil, e.log)
	}
	sock := filepath.Join(j.dir, "registry.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("the job's registry proxy: %w", err)
	}
	f := &forwarder{sock: sock, ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Warn("microVM registry proxy stopped", "job", j.id, "err", err)
		}
	}()
	j.fwd = f
	j.regEnv = switchEnv(spec)
	return nil
}

func (f *forwarder) close() { _ = f.srv.Close() }

// qemuArgs is the forwarding network's part of QEMU's command line, with
// the agent binary on the host as the relay.
func (f *forwarder) qemuArgs(agent string) []string {
	esc := func(s string) string { return strings.ReplaceAll(s, ",", ",,") }
	return []string{
		"-netdev", "user,id=fwd,restrict=on,net=" + fwdNet + ",host=" + fwdHost +
			",guestfwd=tcp:" + registryAddr + ":80-cmd:" + esc(agent) + " -relay " + esc(f.sock),
		"-device", "virtio-net-device,netdev=fwd,mac=" + netMAC(fwdMACHost),
	}
}

// kernelArgs is the forwarding network's part of the guest's command line.
func (f *forwarder) kernelArgs() string {
	return " vk.net=" + fwdGuest + "/24@" + netMAC(fwdMACHost) + " vk.host=" + registryAddr + "," + regproxy.Host
}
