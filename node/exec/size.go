package exec

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a job's envelope.
type Size struct {
	// CPUs is the number of whole CPUs; 0 means not limited.
	CPUs int
	// MemMiB is memory in MiB; 0 means not limited.
	MemMiB int64
}

// HintPrefix starts a sizing hint line in a job's script, e.g.
// `# vk:hint cpus=2 mem=4G`.
const HintPrefix = "# vk:hint"

// SizeInput is what [SizeJob] sizes a job from.
type SizeInput struct {
	// CPUsVar and MemVar are the values of the MICROVM_CPUS and MICROVM_MEM
	// job variables, "" when unset.
	CPUsVar, MemVar string
	// Script holds the job's command lines; the first `# vk:hint` line
	// among them is read.
	Script []string
	// Default is the size when the job says nothing: the reservation's
	// envelope.
	Default Size
	// Ceiling is the node's per-job ceiling; a zero field means none.
	Ceiling Size
}

// SizeJob sizes a job (NODE-09, NODE-17): MICROVM_CPUS and MICROVM_MEM win,
// a `# vk:hint` line fills what they leave unset, the default fills the
// rest, and the node's ceilings clamp the result. Notes explain values that
// were not understood or were clamped, for the job's trace.
//
// MICROVM_MEM and the hint's mem= take MiB as a bare number or a number
// with a unit: M/MB/MiB, G/GB/GiB (binary multiples either way).
func SizeJob(in SizeInput) (Size, []string) {
	var notes []string
	s := in.Default
	var hint Size
	for _, line := range in.Script {
		for l := range strings.SplitSeq(line, "\n") {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, HintPrefix) {
				continue
			}
			h, err := parseHint(strings.TrimPrefix(l, HintPrefix))
			if err != nil {
				notes = append(notes, fmt.Sprintf("ignoring %q: %v", l, err))
			} else {
				hint = h
			}
			goto hinted
		}
	}
hinted:
	if hint.CPUs > 0 {
		s.CPUs = hint.CPUs
	}
	if hint.MemMiB > 0 {
		s.MemMiB = hint.MemMiB
	}
	if in.CPUsVar != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(in.CPUsVar)); err != nil || n <= 0 {
			notes = append(notes, fmt.Sprintf("ignoring MICROVM_CPUS=%q: not a positive integer", in.CPUsVar))
		} else {
			s.CPUs = n
		}
	}
	if in.MemVar != "" {
		if n, err := ParseMiB(in.MemVar); err != nil {
			notes = append(notes, fmt.Sprintf("ignoring MICROVM_MEM=%q: %v", in.MemVar, err))
		} else {
			s.MemMiB = n
		}
	}
	if c := in.Ceiling.CPUs; c > 0 && s.CPUs > c {
		notes = append(notes, fmt.Sprintf("cpus %d clamped to the node's ceiling of %d", s.CPUs, c))
		s.CPUs = c
	}
	if c := in.Ceiling.MemMiB; c > 0 && s.MemMiB > c {
		notes = append(notes, fmt.Sprintf("memory %d MiB clamped to the node's ceiling of %d MiB", s.MemMiB, c))
		s.MemMiB = c
	}
	return s, notes
}

func parseHint(rest string) (Size, error) {
	var h Size
	for f := range strings.FieldsSeq(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Size{}, fmt.Errorf("%q is not key=value", f)
		}
		switch strings.ToLower(k) {
		case "cpus":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Size{}, fmt.Errorf("cpus=%q is not a positive integer", v)
			}
			h.CPUs = n
		case "mem":
			n, err := ParseMiB(v)
			if err != nil {
				return Size{}, err
			}
			h.MemMiB = n
		default:
			return Size{}, fmt.Errorf("unknown key %q", k)
		}
	}
	return h, nil
}

// ParseMiB reads a memory size in MiB: a bare number of MiB, or a number
// followed by M, MB, MiB, G, GB or GiB (case-insensitive).
func ParseMiB(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive memory size", s)
	}
	switch strings.ToLower(strings.TrimSpace(s[i:])) {
	case "", "m", "mb", "mib":
	case "g", "gb", "gib":
		n *= 1024
	default:
		return 0, fmt.Errorf("%q has an unknown unit", s)
	}
	if n > 1<<40 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n, nil
}
