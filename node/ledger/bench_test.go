package ledger

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkOfferRenewStartFinish measures one reservation's whole life on a
// ledger already holding 100 reservations and 100 jobs.
func BenchmarkOfferRenewStartFinish(b *testing.B) {
	l := New(Capacity{Total: Envelope{MemBytes: 1 << 40, DiskBytes: 1 << 40, CPUs: 1 << 20}})
	for i := range 100 {
		l.Offer(0, fmt.Sprintf("held%d", i), Envelope{1, 1, 1}, MaxLeaseSecs)
		l.Start(0, fmt.Sprintf("job%d", i), "", Envelope{1, 1, 1})
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)] + "-" + fmt.Sprint(i)
		now := time.Duration(i) * time.Millisecond
		l.Offer(now, id, Envelope{4, 4, 1}, 90)
		l.Renew(now, id, 90)
		l.Start(now, id, id, Envelope{4, 4, 1})
		l.Resize(id, Envelope{2, 2, 1})
		l.Finish(id)
		i++
	}
}
