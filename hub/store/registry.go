package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Opener opens a store from the part of the location after its prefix.
type Opener func(ctx context.Context, rest string) (Store, error)

// ErrUnknownKind is returned (wrapped) by [Open] when no implementation is
// registered for a location.
var ErrUnknownKind = errors.New("store: no implementation registered")

var (
	regMu    sync.Mutex
	registry = map[string]Opener{}
)

// Register makes an implementation available to [Open] under prefix, which
// ends in ":" ("mem:", "bolt:"), or is "" for the default taking a plain
// path. Implementations call it from init; registering a prefix twice
// panics (a programming error).
func Register(prefix string, open Opener) {
	if prefix != "" && !strings.HasSuffix(prefix, ":") {
		panic(fmt.Sprintf("store: prefix %q must end in ':'", prefix))
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[prefix]; dup {
		panic(fmt.Sprintf("store: prefix %q registered twice", prefix))
	}
	registry[prefix] = open
}

// Open opens the store at location: "<prefix>:<rest>" picks the
// implementation registered for that prefix ("mem:" is memstore, "bolt:"
// and a plain path are boltstore); anything else is a path for the default
// implementation registered with prefix "". The program must import the
// implementations it allows (blank imports of boltstore and memstore).
func Open(ctx context.Context, location string) (Store, error) {
	regMu.Lock()
	var (
		best   string
		opener Opener
	)
	for p, o := range registry {
		if p != "" && strings.HasPrefix(location, p) && len(p) > len(best) {
			best, opener = p, o
		}
	}
	if opener == nil {
		opener = registry[""]
	}
	regMu.Unlock()
	if opener == nil {
		return nil, fmt.Errorf("%w for %q (registered: %s)", ErrUnknownKind, location, strings.Join(Prefixes(), ", "))
	}
	return opener(ctx, strings.TrimPrefix(location, best))
}

// Prefixes lists the registered prefixes, sorted ("" shown as "<path>").
func Prefixes() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for p := range registry {
		out = append(out, cmp.Or(p, "<path>"))
	}
	sort.Strings(out)
	return out
}
