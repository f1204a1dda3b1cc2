package node

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// spec: NSESS-14
// Property: however the trace is cut into writes, the scanner reports
// every section start once, in order, and nothing else.
func TestStageScannerAnySplit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "markers")
		var b strings.Builder
		var want []string
		for i := range n {
			b.WriteString(rapid.StringOfN(rapid.RuneFrom([]rune("abc xyz\n\r0123[]")), 0, 300, -1).Draw(t, "text"))
			name := rapid.StringMatching(`[a-z_]{1,20}`).Draw(t, "name")
			b.WriteString("section_start:17960" + strings.Repeat("0", i%3) + ":" + name)
			if rapid.Bool().Draw(t, "collapsed") {
				b.WriteString("[collapsed=true]")
			}
			b.WriteString("\r\x1b[0K")
			want = append(want, name)
		}
		b.WriteString("tail without markers, or a section_end:1:x\n")
		stream := []byte(b.String())
		var s stageScanner
		var got []string
		for len(stream) > 0 {
			k := rapid.IntRange(1, len(stream)).Draw(t, "piece")
			got = append(got, s.scan(stream[:k])...)
			stream = stream[k:]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scanner found %q, want %q", got, want)
		}
	})
}
