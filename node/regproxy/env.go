package regproxy

import (
	"errors"
	"fmt"
	"strings"
)

// Names of the steps' variables (XFER-22).
const (
	EnvRegistry   = "VK_REGISTRY"
	EnvNamespaces = "VK_REGISTRY_NAMESPACES"
)

// NetModeSwitch is the one net.mode under which a job gets the proxy and
// its variables (XFER-23).
const NetModeSwitch = "switch"

// ErrBadNamespace is returned by [Namespace.Validate].
var ErrBadNamespace = errors.New("regproxy: bad registry namespace")

// Namespace is one grant of the job's registry token as the steps see it.
type Namespace struct {
	// Prefix is the repository (or file) path prefix the grant covers,
	// e.g. "tenants/acme/ci"; it must be non-empty and hold no space, tab,
	// newline or "=".
	Prefix string
	// Rights is a subset of "rwl": r read, w write, l lock. Order and
	// repeats do not matter; [Env] writes them as r, w, l.
	Rights string
}

// Validate reports a namespace [Env] would leave out, wrapping
// [ErrBadNamespace].
func (n Namespace) Validate() error {
	if n.Prefix == "" || strings.ContainsAny(n.Prefix, " \t\r\n\v\f=") {
		return fmt.Errorf("%w: prefix %q", ErrBadNamespace, n.Prefix)
	}
	if n.Rights == "" || strings.Trim(n.Rights, "rwl") != "" {
		return fmt.Errorf("%w: %s: rights %q: want letters of rwl", ErrBadNamespace, n.Prefix, n.Rights)
	}
	return nil
}

// rights returns n.Rights in canonical order without repeats.
func (n Namespace) rights() string {
	var b strings.Builder
	for _, c := range "rwl" {
		if strings.ContainsRune(n.Rights, c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// Env returns the steps' variables as KEY=value strings (XFER-22):
// VK_REGISTRY=http://registry.vk and VK_REGISTRY_NAMESPACES, the
// namespaces in the given order as space-separated "<prefix>=<rights>".
// Namespaces failing [Namespace.Validate] are left out (the caller should
// have refused them, with Validate, where they arrived). With none, the
// second variable is present and empty: a job whose proxy refuses
// everything still learns that it has no grants. Call it only when
// [Enabled] (XFER-23).
func Env(namespaces []Namespace) []string {
	parts := make([]string, 0, len(namespaces))
	for _, n := range namespaces {
		if n.Validate() != nil {
			continue
		}
		parts = append(parts, n.Prefix+"="+n.rights())
	}
	return []string{
		EnvRegistry + "=" + URL,
		EnvNamespaces + "=" + strings.Join(parts, " "),
	}
}

// Enabled reports whether a job in network mode netMode gets the proxy and
// its variables: only net.mode = "switch", the one network that serves
// registry.vk (XFER-23). The comparison is exact.
func Enabled(netMode string) bool { return netMode == NetModeSwitch }
