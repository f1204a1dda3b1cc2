package ui

import (
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.html from the pages")

// normalise drops trailing white space and blank lines, so the golden
// files pin content and markup, not template indentation.
func normalise(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " \t\r"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// The Fleet and Queue pages, rendered from the fixture with a fixed
// session and key, match their golden HTML (go test -update rewrites it).
// spec: OPS-01, OPS-02
func TestGoldenPages(t *testing.T) {
	for _, tc := range []struct{ name, path string }{{"fleet", "/"}, {"queue", "/queue"}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			body, _ := e.get(tc.path, http.StatusOK, &http.Cookie{Name: sessionCookie, Value: fixedSession})
			got := normalise(body)
			file := filepath.Join("testdata", tc.name+".golden.html")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("GET %s differs from %s (-want +got):\n%s", tc.path, file, diff)
			}
		})
	}
}
