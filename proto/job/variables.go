package job

import (
	"os"
	"strings"
)

// Variable is a CI/CD variable (SPEC-11), as GitLab sends it.
type Variable struct {
	// Key is the variable's name. Required.
	Key string `json:"key"`
	// Value is its value; for a file variable, the file's content. Secret
	// unless Public (and not Masked nor File): see [Variable.Secret].
	Value string `json:"value"`
	// Public: GitLab marks the variable as not sensitive.
	Public bool `json:"public,omitempty"`
	// File: the variable expands to the path of a file holding Value.
	File bool `json:"file,omitempty"`
	// Masked: Value must be masked in the trace.
	Masked bool `json:"masked,omitempty"`
	// Raw: Value is not expanded.
	Raw bool `json:"raw,omitempty"`
}

// Secret reports whether v's value is a secret: every variable GitLab did
// not mark public (CI_REPOSITORY_URL, for one, carries the job token and
// is neither public nor masked), and any masked or file variable even when
// marked public (file variables hold keys and certificates far more often
// than not).
func (v Variable) Secret() bool { return !v.Public || v.Masked || v.File }

// Lookup returns the value of the last variable named key, as gitlab-runner
// resolves duplicates, and whether there was one.
func Lookup(vars []Variable, key string) (string, bool) {
	for i := len(vars) - 1; i >= 0; i-- {
		if vars[i].Key == key {
			return vars[i].Value, true
		}
	}
	return "", false
}

// Environ returns vars as an environment, one "KEY=value" each in their
// order, as a service's main process gets its variables (a later
// duplicate wins, as in any environment).
func Environ(vars []Variable) []string {
	out := make([]string, 0, len(vars))
	for _, v := range vars {
		out = append(out, v.Key+"="+v.Value)
	}
	return out
}

// FlagValue returns the value of the job's feature flag variable name as
// gitlab-runner reads it before parsing it (getVariablesForFeatureFlagResolution):
// the last variable of that name, [Expand]ed unless raw, in one pass,
// against the job's variables (the last of a key winning) and, for a key
// the job does not set, fallback (gitlab-runner's feature flag defaults;
// nil: none); and whether the job sets it.
func (j *CiJob) FlagValue(name string, fallback func(string) (string, bool)) (string, bool) {
	for i := len(j.Variables) - 1; i >= 0; i-- {
		v := j.Variables[i]
		if v.Key != name {
			continue
		}
		if v.Raw {
			return v.Value, true
		}
		return Expand(v.Value, func(key string) (string, bool) {
			if s, ok := Lookup(j.Variables, key); ok {
				return s, true
			}
			if fallback != nil {
				return fallback(key)
			}
			return "", false
		}), true
	}
	return "", false
}

// Timestamps reports whether the node stamps the job's output lines: the
// FF_TIMESTAMPS job variable ([CiJob.FlagValue]), true unless set to a
// false value ("false",
// "0", "f", case-insensitive, as strconv.ParseBool reads it) (TRACE-03).
// An unparseable value keeps the default, as gitlab-runner's feature flags do.
func (j *CiJob) Timestamps() bool {
	v, ok := j.FlagValue("FF_TIMESTAMPS", nil)
	if !ok {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "f", "false":
		return false
	}
	return true
}

// Expand replaces $KEY, ${KEY} and $$ in value the way gitlab-runner
// expands non-raw variables (spec.Variables.ExpandValue): os.Expand, with
// "$" naming a literal $, the shell's special parameters ($*, $#, $@, $!,
// $?, $0 … $9) expanding to "", any other key to lookup's value or "", and
// bad syntax eaten as os.Expand eats it ("${A" gives "A"). A variable value
// such as `awk '{print $1}'` therefore loses its $1, as in gitlab-runner.
func Expand(value string, lookup func(string) (string, bool)) string {
	if !strings.Contains(value, "$") {
		return value
	}
	return os.Expand(value, func(key string) string {
		switch key {
		case "$":
			return "$"
		case "*", "#", "@", "!", "?", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9":
			return ""
		}
		v, _ := lookup(key)
		return v
	})
}
