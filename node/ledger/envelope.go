package ledger

import "fmt"

// Envelope is an amount of node resources. The zero value is nothing.
type Envelope struct {
	// MemBytes is memory in bytes.
	MemBytes int64
	// DiskBytes is disk in bytes.
	DiskBytes int64
	// CPUs is whole vCPUs.
	CPUs int64
}

// valid reports whether no field is negative.
func (e Envelope) valid() bool { return e.MemBytes >= 0 && e.DiskBytes >= 0 && e.CPUs >= 0 }

func (e Envelope) add(o Envelope) Envelope {
	return Envelope{e.MemBytes + o.MemBytes, e.DiskBytes + o.DiskBytes, e.CPUs + o.CPUs}
}

func (e Envelope) sub(o Envelope) Envelope {
	return Envelope{e.MemBytes - o.MemBytes, e.DiskBytes - o.DiskBytes, e.CPUs - o.CPUs}
}

// minEach is the per-field minimum of e and o.
func (e Envelope) minEach(o Envelope) Envelope {
	return Envelope{min(e.MemBytes, o.MemBytes), min(e.DiskBytes, o.DiskBytes), min(e.CPUs, o.CPUs)}
}

// LessEq reports whether every field of e is at most the same field of o.
func (e Envelope) LessEq(o Envelope) bool {
	return e.MemBytes <= o.MemBytes && e.DiskBytes <= o.DiskBytes && e.CPUs <= o.CPUs
}

// short names the first resource of e that free cannot cover, or "".
func (e Envelope) short(free Envelope) (Reason, string) {
	switch {
	case e.MemBytes > free.MemBytes:
		return ReasonMemory, fmt.Sprintf("memory: want %d bytes, %d free", e.MemBytes, max(free.MemBytes, 0))
	case e.DiskBytes > free.DiskBytes:
		return ReasonDisk, fmt.Sprintf("disk: want %d bytes, %d free", e.DiskBytes, max(free.DiskBytes, 0))
	case e.CPUs > free.CPUs:
		return ReasonCPUs, fmt.Sprintf("cpus: want %d, %d free", e.CPUs, max(free.CPUs, 0))
	}
	return "", ""
}
