package trace

import (
	"bytes"
	"slices"
	"strings"
)

// phraseMasker replaces every byte of every occurrence of any phrase, across
// write boundaries. Occurrences that overlap or touch form one masked run,
// written as one [Masked] per occurrence of the run's cover: the longest
// occurrence at the run's start, then repeatedly the occurrence reaching
// furthest among those starting inside (or at the end of) what is covered.
// So adjacent values read "[MASKED][MASKED]" as gitlab-runner prints them,
// and a value overlapping another never leaves a part of itself behind
// (gitlab-runner masks the longest first and can leave the rest of a
// shorter one that overlaps it).
//
// The masker holds back the shortest tail that might still grow into a
// phrase, so its output does not depend on how the input was split.
type phraseMasker struct {
	next    sink
	phrases [][]byte
	anchors []int     // per phrase: index of its rarest byte, searched for first
	first   [256]bool // first bytes of phrases
	held    []byte
	// cov bytes at the start of held are already masked; open: a masked
	// run ends at held[cov] and may still be extended.
	cov     int
	open    bool
	scratch []byte
	occ     []occurrence
}

type occurrence struct{ start, end int }

func newPhraseMasker(next sink, phrases []string) *phraseMasker {
	m := &phraseMasker{next: next}
	for _, p := range UniquePhrases(phrases) {
		m.phrases = append(m.phrases, []byte(p))
		m.first[p[0]] = true
	}
	// Longest first, so the first match found at a position is the longest.
	slices.SortStableFunc(m.phrases, func(a, b []byte) int { return len(b) - len(a) })
	for _, ph := range m.phrases {
		m.anchors = append(m.anchors, rarestByte(ph))
	}
	return m
}

// byteScore estimates how common a byte is in build logs (higher: more
// common), to pick the byte of a phrase to search for.
func byteScore(c byte) int {
	switch {
	case c == ' ' || strings.IndexByte("etaoinsrhl", c) >= 0:
		return 10
	case c >= 'a' && c <= 'z':
		return 8
	case c == '/' || c == '.':
		return 7
	case c >= '0' && c <= '9':
		return 6
	case c >= 'A' && c <= 'Z':
		return 5
	case c == '-' || c == '_' || c == ':' || c == ',':
		return 4
	case c >= 0x80:
		return 3
	case c < 0x20:
		return 1
	default:
		return 2
	}
}

func rarestByte(ph []byte) int {
	best := 0
	for i := range ph {
		if byteScore(ph[i]) < byteScore(ph[best]) {
			best = i
		}
	}
	return best
}

// index returns the first occurrence of phrase i in data, searching for its
// rarest byte and checking the rest, or -1.
func (m *phraseMasker) index(data []byte, i int) int {
	ph, k := m.phrases[i], m.anchors[i]
	for off := k; off < len(data); {
		j := bytes.IndexByte(data[off:], ph[k])
		if j < 0 {
			return -1
		}
		start := off + j - k
		if start+len(ph) > len(data) {
			return -1
		}
		if bytes.Equal(data[start:start+len(ph)], ph) {
			return start
		}
		off += j + 1
	}
	return -1
}

// occurrences lists every occurrence of every phrase in data, overlapping
// ones included, ordered by start and, at one start, longest first.
func (m *phraseMasker) occurrences(data []byte) []occurrence {
	occ := m.occ[:0]
	for n, ph := range m.phrases {
		for off := 0; off+len(ph) <= len(data); {
			i := m.index(data[off:], n)
			if i < 0 {
				break
			}
			occ = append(occ, occurrence{off + i, off + i + len(ph)})
			off += i + 1
		}
	}
	slices.SortFunc(occ, func(a, b occurrence) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return b.end - a.end
	})
	m.occ = occ
	return occ
}

func (m *phraseMasker) write(p []byte) error {
	if len(m.phrases) == 0 {
		return m.next.write(p)
	}
	return m.process(p, false)
}

// mask: an upstream mask (there is none today: the phrase masker is first)
// ends any run and passes through.
func (m *phraseMasker) mask() error {
	if err := m.flush(); err != nil {
		return err
	}
	return m.next.mask()
}

// process masks held+p. Unless final, it stops where a decision needs bytes
// not seen yet, and holds the rest.
func (m *phraseMasker) process(p []byte, final bool) error {
	data := p
	if len(m.held) > 0 {
		m.scratch = append(append(m.scratch[:0], m.held...), p...)
		data = m.scratch
	}
	h := len(data)
	if !final {
		h = m.holdStart(data)
	}
	occ := m.occurrences(data)
	pos, covEnd, open := m.cov, m.cov, m.open
	k := 0     // occ[:k] start before pos or were considered
	j := 0     // occ[:j] start at or before covEnd
	reach := 0 // the furthest end among occ[:j]
	for {
		if open {
			if h <= covEnd {
				break // a phrase starting in the run may still complete
			}
			// covEnd only grows, so occ[:j] only grows: linear in the
			// occurrences however long the run.
			for j < len(occ) && occ[j].start <= covEnd {
				reach = max(reach, occ[j].end)
				j++
			}
			best := max(covEnd, reach)
			if best > covEnd {
				if err := m.next.mask(); err != nil {
					return err
				}
				covEnd, pos = best, best
				continue
			}
			open = false
		}
		for k < len(occ) && occ[k].start < pos {
			k++
		}
		limit := h
		if k < len(occ) && occ[k].start < h {
			limit = occ[k].start
		}
		if limit > pos {
			if err := m.next.write(data[pos:limit]); err != nil {
				return err
			}
			pos = limit
		}
		if k < len(occ) && occ[k].start < h {
			if err := m.next.mask(); err != nil {
				return err
			}
			covEnd, pos, open = occ[k].end, occ[k].end, true
			continue
		}
		break
	}
	from := pos
	if open {
		// Keep what the run's next step will need: the tail that may
		// grow into a phrase, and the occurrences that reach past the
		// run but could not be chosen yet.
		from = min(covEnd, h)
		for _, o := range occ {
			if o.start > covEnd {
				break
			}
			if o.end > covEnd {
				from = min(from, o.start)
			}
		}
	}
	m.held = append(m.held[:0], data[from:]...) // data is p or m.scratch, never m.held
	m.cov, m.open = pos-from, open
	if final {
		m.held, m.cov, m.open = m.held[:0], 0, false
	}
	return nil
}

// holdStart returns the earliest index i such that data[i:] is a proper
// prefix of some phrase, or len(data).
func (m *phraseMasker) holdStart(data []byte) int {
	maxLen := len(m.phrases[0])
	for i := max(0, len(data)-maxLen+1); i < len(data); i++ {
		if !m.first[data[i]] {
			continue
		}
		tail := data[i:]
		for _, ph := range m.phrases {
			if len(ph) > len(tail) && bytes.HasPrefix(ph, tail) {
				return i
			}
		}
	}
	return len(data)
}

func (m *phraseMasker) flush() error {
	if len(m.held) == 0 && !m.open {
		return nil
	}
	return m.process(nil, true)
}
