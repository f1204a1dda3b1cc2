package job

import "strings"

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

// Timestamps reports whether the node stamps the job's output lines: the
// FF_TIMESTAMPS job variable, true unless set to a false value ("false",
// "0", "f", case-insensitive, as strconv.ParseBool reads it) (TRACE-03).
// An unparseable value keeps the default, as gitlab-runner's feature flags do.
func (j *CiJob) Timestamps() bool {
	v, ok := Lookup(j.Variables, "FF_TIMESTAMPS")
	if !ok {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "f", "false":
		return false
	}
	return true
}
