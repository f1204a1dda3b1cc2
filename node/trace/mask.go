package trace

import (
	"bytes"
	"slices"
	"strings"
)

// Masked is the text every masked value, token or URL parameter value is
// replaced with, as gitlab-runner writes it.
const Masked = "[MASKED]"

var maskedBytes = []byte(Masked)

// DefaultTokenPrefixes are the token prefixes masked on every job, as
// gitlab-runner 19.5 masks them with FF_MASK_ALL_DEFAULT_TOKENS on (its
// default). The job's features.token_mask_prefixes are added to these.
var DefaultTokenPrefixes = []string{
	"glpat-", "gloas-", "gldt-", "glrt-", "glcbt-", "glrtr-", "glptt-", "glft-",
	"glimt-", "glagent-", "glsoat-", "glffct-", "_gitlab_session=", "gltok-",
}

// MaxTokenPrefixes is how many token prefixes apply after sorting by (length,
// bytes): gitlab-runner silently drops the rest, and so do we (TRACE-05).
const MaxTokenPrefixes = 15

// URLParams are the URL query parameters whose values are masked
// (case-insensitive key, after '?' or '&').
var URLParams = []string{
	"private_token", "authenticity_token", "rss_token",
	"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
}

// filter is one streaming stage of a stream's pipeline: write may hold back
// a tail it cannot decide yet; flush emits everything held.
type filter interface {
	write(p []byte) error
	flush() error
}

// sink is where a filter sends its output. mask writes [Masked] for a
// value an earlier filter masked: the later filters pass it through without
// reading it, so a token run that a masked value interrupts goes on after
// it (as gitlab-runner's sanitisers let an upstream "[MASKED]" through).
type sink interface {
	write(p []byte) error
	mask() error
}

// UniquePhrases returns the values to mask the way gitlab-runner prepares
// them: trimmed of surrounding white space, empty ones dropped, duplicates
// removed. The order of first appearance is kept.
func UniquePhrases(values []string) []string {
	seen := make(map[string]bool, len(values))
	var out []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	return out
}

// EffectiveTokenPrefixes returns the prefixes that apply for a job supplying
// extra: the defaults plus extra, trimmed, de-duplicated, sorted by (length,
// bytes) and cut to [MaxTokenPrefixes].
func EffectiveTokenPrefixes(extra []string) []string {
	return effectiveTokenPrefixes(extra, DefaultTokenPrefixes)
}

// GlpatOnlyTokenPrefixes are the default token prefixes gitlab-runner masks
// with FF_MASK_ALL_DEFAULT_TOKENS off: glpat- alone.
var GlpatOnlyTokenPrefixes = []string{"glpat-"}

func effectiveTokenPrefixes(extra, defaults []string) []string {
	all := UniquePhrases(append(append([]string(nil), extra...), defaults...))
	slices.SortFunc(all, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	if len(all) > MaxTokenPrefixes {
		all = all[:MaxTokenPrefixes]
	}
	return all
}

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

// valueMasker keeps a matched prefix and replaces the run of value bytes
// that follows it with [Masked] (only when the run is not empty), across
// write boundaries. It serves both the token-prefix sanitiser and the URL
// parameter sanitiser.
type valueMasker struct {
	next    sink
	find    func(data []byte) (start, end int) // earliest full prefix, or -1
	partial func(data []byte) int              // start of a tail that may grow into a prefix, or len(data)
	isValue *[256]bool
	// always writes [Masked] after a prefix even when no value byte
	// follows (URL parameters); else an empty value is left alone (tokens).
	always bool

	// afterPrefix: a prefix ended exactly at the end of the last write, and
	// nothing of the value has been seen yet. inValue: [Masked] was written
	// and value bytes are being swallowed.
	afterPrefix, inValue bool
	held                 []byte
	scratch              []byte
}

func (m *valueMasker) write(p []byte) error {
	data := p
	if len(m.held) > 0 {
		m.scratch = append(append(m.scratch[:0], m.held...), p...)
		data = m.scratch
		m.held = m.held[:0]
	}
	pos := 0
	for pos < len(data) {
		if m.afterPrefix {
			m.afterPrefix = false
			if !m.isValue[data[pos]] {
				continue
			}
			if err := m.next.write(maskedBytes); err != nil {
				return err
			}
			m.inValue = true
		}
		if m.inValue {
			for pos < len(data) && m.isValue[data[pos]] {
				pos++
			}
			if pos == len(data) {
				return nil
			}
			m.inValue = false
		}
		s, e := m.find(data[pos:])
		if s < 0 {
			h := pos + m.partial(data[pos:])
			if h > pos {
				if err := m.next.write(data[pos:h]); err != nil {
					return err
				}
			}
			m.held = append(m.held, data[h:]...)
			return nil
		}
		if err := m.next.write(data[pos : pos+e]); err != nil {
			return err
		}
		pos += e
		if m.always {
			if err := m.next.write(maskedBytes); err != nil {
				return err
			}
			m.inValue = true
			continue
		}
		m.afterPrefix = true
	}
	return nil
}

// mask passes an upstream mask through. Inside a value (or right after a
// prefix) the value goes on after it, as gitlab-runner's sanitiser keeps
// its state across an upstream "[MASKED]"; elsewhere the bytes held as a
// possible prefix are written first.
func (m *valueMasker) mask() error {
	if !m.afterPrefix && !m.inValue && len(m.held) > 0 {
		if err := m.next.write(m.held); err != nil {
			return err
		}
		m.held = m.held[:0]
	}
	return m.next.mask()
}

func (m *valueMasker) flush() error {
	m.afterPrefix, m.inValue = false, false
	if len(m.held) == 0 {
		return nil
	}
	err := m.next.write(m.held)
	m.held = m.held[:0]
	return err
}

var tokenAlphabet = func() (a [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		a[c], a[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		a[c] = true
	}
	for _, c := range "._=-" {
		a[c] = true
	}
	return a
}()

// newTokenMasker masks the value after any of prefixes (already effective:
// see [EffectiveTokenPrefixes]).
func newTokenMasker(next sink, prefixes []string) *valueMasker {
	type group struct {
		lead    []byte // the first two bytes (or the whole prefix when shorter)
		members [][]byte
	}
	var groups []*group
	byLead := map[string]*group{}
	var ps [][]byte
	for _, p := range prefixes {
		if p == "" {
			continue
		}
		lead := p[:min(2, len(p))]
		g := byLead[lead]
		if g == nil {
			g = &group{lead: []byte(lead)}
			byLead[lead] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, []byte(p))
		ps = append(ps, []byte(p))
	}
	maxLen := 0
	var first [256]bool
	for _, p := range ps {
		maxLen = max(maxLen, len(p))
		first[p[0]] = true
	}
	find := func(data []byte) (int, int) {
		best, bestEnd := -1, -1
		for _, g := range groups {
			off := 0
			for {
				hay := data[off:]
				if best >= 0 {
					hay = data[off:min(len(data), best)]
				}
				i := bytes.Index(hay, g.lead)
				if i < 0 {
					break
				}
				at := off + i
				matched := false
				for _, mem := range g.members {
					if bytes.HasPrefix(data[at:], mem) {
						best, bestEnd = at, at+len(mem)
						matched = true
						break
					}
				}
				if matched {
					break
				}
				off = at + 1
			}
		}
		return best, bestEnd
	}
	partial := func(data []byte) int {
		for i := max(0, len(data)-maxLen+1); i < len(data); i++ {
			if !first[data[i]] {
				continue
			}
			for _, p := range ps {
				if len(p) > len(data)-i && bytes.HasPrefix(p, data[i:]) {
					return i
				}
			}
		}
		return len(data)
	}
	return &valueMasker{next: next, find: find, partial: partial, isValue: &tokenAlphabet}
}

// urlValue: a parameter's value runs to white space, a control character,
// '&' or '?'.
var urlValue = func() (a [256]bool) {
	for i := range a {
		a[i] = i > ' ' && i != 0x7f && i != '&' && i != '?'
	}
	return a
}()

// newURLMasker masks the values of [URLParams] in URLs (`?key=` or `&key=`,
// key case-insensitive) up to the end of the parameter; like gitlab-runner
// it writes [Masked] even for an empty value.
func newURLMasker(next sink) *valueMasker {
	maxKey := 0
	for _, k := range URLParams {
		maxKey = max(maxKey, len(k))
	}
	// matchAt reports the length of `?key=` at data[i:], 0 for none, -1 when
	// data ends before it could be decided.
	matchAt := func(data []byte, i int) int {
		rest := data[i+1:]
		undecided := false
		for _, k := range URLParams {
			n := len(k) + 1
			if len(rest) < n {
				if bytes.EqualFold(rest, []byte(k + "=")[:len(rest)]) {
					undecided = true
				}
				continue
			}
			if bytes.EqualFold(rest[:len(k)], []byte(k)) && rest[len(k)] == '=' {
				return n + 1
			}
		}
		if undecided {
			return -1
		}
		return 0
	}
	find := func(data []byte) (int, int) {
		off := 0
		q, a := -2, -2 // next '?' and '&' at or after off; -2 unknown, -1 none
		for {
			if q != -1 && q < off {
				if q = bytes.IndexByte(data[off:], '?'); q >= 0 {
					q += off
				}
			}
			if a != -1 && a < off {
				if a = bytes.IndexByte(data[off:], '&'); a >= 0 {
					a += off
				}
			}
			at := q
			if at < 0 || (a >= 0 && a < at) {
				at = a
			}
			if at < 0 {
				return -1, -1
			}
			if n := matchAt(data, at); n > 0 {
				return at, at + n
			}
			off = at + 1
		}
	}
	partial := func(data []byte) int {
		for i := max(0, len(data)-maxKey-1); i < len(data); i++ {
			if (data[i] == '?' || data[i] == '&') && matchAt(data, i) < 0 {
				return i
			}
		}
		return len(data)
	}
	return &valueMasker{next: next, find: find, partial: partial, isValue: &urlValue, always: true}
}
