package trace

import "bytes"

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
