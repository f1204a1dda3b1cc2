package job

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeSpec feeds arbitrary bytes to the spec decoder the hub runs on
// every submission: decoding never panics, and whatever decodes survives
// Validate, CheckSize, Redacted and a stable re-encoding.
//
// spec: PROTO-12, API-35, AUTH-07
func FuzzDecodeSpec(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "spec_*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"gitlab_ci","gitlab_ci":null}`))
	f.Add([]byte(`{"kind":"gitlab_ci","gitlab_ci":{"sources":{"repo_url":"https://u:p@h/x","protected":null}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s JobSpec
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		_ = s.Validate()
		_ = s.CheckSize()
		if r := s.Redacted(); r.GitLabCI != nil {
			if r.GitLabCI.Token != "" {
				t.Fatalf("token kept after Redacted")
			}
			for _, d := range r.GitLabCI.Dependencies {
				if d.Token != "" {
					t.Fatalf("dependency token kept after Redacted")
				}
			}
		}
		enc1, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again JobSpec
		if err := json.Unmarshal(enc1, &again); err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		enc2, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc1) != string(enc2) {
			t.Fatalf("unstable encoding:\n%s\n%s", enc1, enc2)
		}
	})
}
