package job

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// TestRedactedRemovesEverySecret: whatever the job, no secret value survives
// in the redacted spec's encoding, and every other value does.
//
// spec: AUTH-07
func TestRedactedRemovesEverySecret(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		j := genCiJob.Draw(t, "job")
		before, _ := json.Marshal(j)
		r := j.Redacted()
		out, err := json.Marshal(NewGitLabCI(&r))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "SECRET") {
			t.Fatalf("a secret survived redaction: %s", out)
		}
		after, _ := json.Marshal(j)
		if string(before) != string(after) {
			t.Fatalf("Redacted modified its receiver")
		}
		// Everything but the secrets is kept: blank the secrets in a copy
		// by hand and compare.
		want := j.clone()
		want.Token = ""
		blank := func(vs []Variable) {
			for i := range vs {
				if vs[i].Secret() {
					vs[i].Value = ""
				}
			}
		}
		blank(want.Variables)
		if want.Image != nil {
			blank(want.Image.Variables)
		}
		for i := range want.Services {
			blank(want.Services[i].Variables)
		}
		for i := range want.RegistryCredentials {
			want.RegistryCredentials[i].Password = ""
		}
		for i := range want.Dependencies {
			want.Dependencies[i].Token = ""
		}
		if d := cmp.Diff(want, r); d != "" {
			t.Fatalf("Redacted changed more than the secrets (-want +got):\n%s", d)
		}
	})
}

// fill sets every field reachable from v (strings, numbers, bools, slices
// of length 1, non-nil pointers) to distinct non-zero values, so a test
// sees every field, including ones added after it was written.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("v" + strconv.Itoa(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	}
}

// collect gathers every string reachable from v with its path.
func collect(v reflect.Value, path string, out map[string]string) {
	switch v.Kind() {
	case reflect.String:
		out[path] = v.String()
	case reflect.Pointer:
		if !v.IsNil() {
			collect(v.Elem(), path, out)
		}
	case reflect.Slice:
		for i := range v.Len() {
			collect(v.Index(i), path+"[]", out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			collect(v.Field(i), path+"."+v.Type().Field(i).Name, out)
		}
	}
}

// TestRedactedFieldSet drives Redacted over a job with every field set by
// reflection and checks that exactly the documented secret fields change.
// A new secret field must be added here and to Redacted; a new plain field
// is checked automatically.
//
// spec: AUTH-07
func TestRedactedFieldSet(t *testing.T) {
	var j CiJob
	n := 0
	fill(reflect.ValueOf(&j).Elem(), &n)
	j.Sources.RepoURL = "https://gitlab-ci-token:leaked@gitlab.example.com/a/b.git"
	before := map[string]string{}
	collect(reflect.ValueOf(j), "", before)
	r := j.Redacted()
	after := map[string]string{}
	collect(reflect.ValueOf(r), "", after)
	var changed []string
	for p, v := range before {
		if after[p] != v {
			changed = append(changed, p)
		}
	}
	slices.Sort(changed)
	want := []string{
		".Dependencies[].Token",
		".Image.Variables[].Value",
		".RegistryCredentials[].Password",
		".Services[].Variables[].Value",
		".Sources.RepoURL",
		".Token",
		".Variables[].Value",
	}
	if d := cmp.Diff(want, changed); d != "" {
		t.Errorf("fields changed by Redacted (-want +got):\n%s", d)
	}
	if got := r.Sources.RepoURL; got != "https://gitlab.example.com/a/b.git" {
		t.Errorf("RepoURL = %q, want credentials stripped", got)
	}
	for p, v := range after {
		if strings.Contains(v, "leaked") {
			t.Errorf("%s = %q still holds the URL's password", p, v)
		}
	}
}

// TestRedactedSharesNoMemory mutates every reachable value of the copy and
// checks the original is unchanged, so the copy is deep for every field,
// including fields added later.
//
// spec: AUTH-07
func TestRedactedSharesNoMemory(t *testing.T) {
	var j CiJob
	n := 0
	fill(reflect.ValueOf(&j).Elem(), &n)
	j.Sources.RepoURL = "https://gitlab.example.com/a/b.git"
	before, _ := json.Marshal(j)
	r := j.Redacted()
	n = 1000
	mutate(reflect.ValueOf(&r).Elem(), &n)
	after, _ := json.Marshal(j)
	if string(before) != string(after) {
		t.Fatalf("mutating the redacted copy changed the original:\n%s", cmp.Diff(string(before), string(after)))
	}
}

// mutate changes every value inside slices and pointers of v in place.
func mutate(v reflect.Value, n *int) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fill(v.Elem(), n)
		}
	case reflect.Slice:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			mutate(v.Field(i), n)
		}
	}
}

func TestStripUserinfo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://gitlab.example.com/a/b.git", "https://gitlab.example.com/a/b.git"},
		{"https://gitlab-ci-token:tok@gitlab.example.com/a/b.git", "https://gitlab.example.com/a/b.git"},
		{"https://user@host/x", "https://host/x"},
		{"http://[::1%zz/x", ""},
		{"", ""},
	} {
		if got := stripUserinfo(tc.in); got != tc.want {
			t.Errorf("stripUserinfo(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLogValueHidesSecrets: logging a spec, even by accident, writes no
// secret.
//
// spec: AUTH-07
func TestLogValueHidesSecrets(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	j := fullJob()
	log.Info("job", "spec", NewGitLabCI(j), "job", j)
	out := buf.String()
	for _, secret := range []string{j.Token, j.Dependencies[0].Token, j.RegistryCredentials[0].Password, j.Variables[2].Value, "pg-secret"} {
		if strings.Contains(out, secret) {
			t.Errorf("log line holds secret %q: %s", secret, out)
		}
	}
	if !strings.Contains(out, `"project_path":"acme/web"`) || !strings.Contains(out, `"gitlab_job":4242`) {
		t.Errorf("log line lacks the job's identity: %s", out)
	}
}
