package node

import (
	"strconv"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// BenchmarkOfferRoundTrip measures offer → offer_reply through the real
// session over TLS on loopback (NODE-01: answered at once).
func BenchmarkOfferRoundTrip(b *testing.B) {
	h, _ := connectedB(b)
	for i := range b.N {
		id := "r-" + strconv.Itoa(i)
		from := h.mark()
		h.send(&dispatch.Offer{Reservation: id, Envelope: env1, LeaseSecs: 90})
		waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == id })
		h.send(&dispatch.Release{Reservation: id})
	}
}

// BenchmarkJobOutput measures a job's output from bash through the spool
// and the session into the hub's store: bytes per second end to end.
func BenchmarkJobOutput(b *testing.B) {
	h, _ := connectedB(b)
	const lines = 100000
	for i := range b.N {
		id := "job-b" + strconv.Itoa(i)
		from := h.mark()
		h.send(&dispatch.Start{Job: id, Envelope: env1, Spec: testSpec("seq -f 'line-%.0f-end' 1 " + strconv.Itoa(lines))})
		r := resultOf(h, from, id)
		b.SetBytes(r.Result.OutputLen)
	}
}
