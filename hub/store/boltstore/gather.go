package boltstore

import "context"

// Gathering is n writes about to be made at once from n goroutines (the
// hub's record writer applying a batch): they commit in one transaction
// and one fsync. Without it the first of them would find no commit under
// way and commit alone, and the others would share a second one.
//
// Each of the n callers passes [Gathering.Context] of its slot to its
// store call and calls [Gathering.Done] once the call returned (whatever
// it did: a write that never reached the store, or one of another store,
// frees its slot there). Until every slot has either made its first write
// or is done, writes queue instead of committing; then the queue commits
// together. A slot's further writes, and other callers' writes, behave as
// usual (they wait for the gathering at most as long as its slowest
// caller takes to reach the store). With the store in solo mode
// (one transaction per write) a Gathering changes nothing.
type Gathering struct {
	g     *groupCommit
	left  int           // slots neither arrived nor done; guarded by g.mu
	slots []*gatherSlot // by index
}

// gatherSlot is one caller's place in a Gathering.
type gatherSlot struct {
	ga   *Gathering
	used bool // arrived or done; guarded by ga.g.mu
}

type slotKey struct{}

// Gather starts a Gathering of n writes (n > 1; otherwise it does
// nothing).
func (s *Store) Gather(n int) *Gathering {
	ga := &Gathering{g: s.group}
	if s.solo || n < 2 {
		return ga
	}
	ga.left = n
	for range n {
		ga.slots = append(ga.slots, &gatherSlot{ga: ga})
	}
	s.group.mu.Lock()
	s.group.holds++
	s.group.mu.Unlock()
	return ga
}

// Context returns ctx carrying slot i, for the store call made in it.
func (ga *Gathering) Context(ctx context.Context, i int) context.Context {
	if i < 0 || i >= len(ga.slots) {
		return ctx
	}
	return context.WithValue(ctx, slotKey{}, ga.slots[i])
}

// Done frees slot i (its caller's store call returned). Idempotent.
func (ga *Gathering) Done(i int) {
	if i < 0 || i >= len(ga.slots) {
		return
	}
	ga.g.mu.Lock()
	ga.slots[i].arriveLocked()
	ga.g.handLeadLocked()
	ga.g.mu.Unlock()
}

// slotOf returns the Gathering slot ctx carries, nil if none.
func slotOf(ctx context.Context) *gatherSlot {
	s, _ := ctx.Value(slotKey{}).(*gatherSlot)
	return s
}

// arriveLocked marks the slot's write arrived (or its caller done): the
// gathering's last one ends its hold. The caller holds g.mu; nil does
// nothing.
func (s *gatherSlot) arriveLocked() {
	if s == nil || s.used {
		return
	}
	s.used = true
	s.ga.left--
	if s.ga.left == 0 {
		s.ga.g.holds--
	}
}
