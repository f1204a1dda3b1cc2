package ui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// A CSRF token verifies for exactly the operator, session and form it
// was made for: any other tuple gets another token.
func TestCSRFTokenProperty(t *testing.T) {
	s := &server{key: testKey}
	part := rapid.StringMatching(`[a-z0-9./:]{0,6}`)
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOfN(part, 2, 5).Draw(t, "a")
		b := rapid.SliceOfN(part, 2, 5).Draw(t, "b")
		ta, tb := s.csrfToken(a[0], a[1], a[2:]...), s.csrfToken(b[0], b[1], b[2:]...)
		if slices.Equal(a, b) != (ta == tb) {
			t.Fatalf("tuples %q and %q: tokens %q and %q", a, b, ta, tb)
		}
	})
}

// ParsePools reads back any list of valid names joined by commas and
// spaces, in order, without duplicates.
func TestParsePoolsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9_.:-]{1,12}`), 0, 10).Draw(t, "names")
		var b strings.Builder
		for i, n := range names {
			if i > 0 {
				b.WriteString(rapid.SampledFrom([]string{",", ", ", " ", " ,\t"}).Draw(t, "sep"))
			}
			b.WriteString(n)
		}
		got, err := ParsePools(b.String())
		if err != nil {
			t.Fatalf("ParsePools(%q): %v", b.String(), err)
		}
		var want []string
		for _, n := range names {
			if !slices.Contains(want, n) {
				want = append(want, n)
			}
		}
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("ParsePools(%q) = %q, want %q", b.String(), got, want)
		}
	})
}

// checkCleanOutput fails unless out is valid UTF-8 free of control
// characters other than tab and newline.
func checkCleanOutput(t interface{ Fatalf(string, ...any) }, in []byte, out string) {
	if !utf8.ValidString(out) {
		t.Fatalf("CleanOutput(%q) = %q: invalid UTF-8", in, out)
	}
	for _, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) {
			t.Fatalf("CleanOutput(%q) = %q: control character %U", in, out, r)
		}
	}
}

func TestCleanOutput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain\ttext\n", "plain\ttext\n"},
		{"\x1b[32;1mgreen\x1b[0;m\n", "green\n"},
		{"a\r\nb\n", "a\nb\n"},
		{"10%\r50%\r100%\ndone", "100%\ndone"},
		{"\x1b]0;title\x07x", "x"},
		{"\x1b]8;;http://x\x1b\\link", "link"},
		{"bell\x07 nul\x00", "bell nul"},
		{"bad \xff utf8", "bad \ufffd utf8"},
		{"c1 \u0085 ok", "c1  ok"},
		{"trailing esc \x1b", "trailing esc "},
		{"trailing csi \x1b[12", "trailing csi "},
		{"ünïcödé ✓", "ünïcödé ✓"},
	} {
		if got := CleanOutput([]byte(tc.in)); got != tc.want {
			t.Errorf("CleanOutput(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.SliceOf(rapid.Byte()).Draw(t, "in")
		checkCleanOutput(t, in, CleanOutput(in))
		// Printable ASCII lines come through unchanged.
		plain := rapid.StringMatching(`[ -~\n]{0,40}`).Draw(t, "plain")
		if got := CleanOutput([]byte(plain)); got != plain {
			t.Fatalf("CleanOutput(%q) = %q, want it unchanged", plain, got)
		}
	})
}

// Parsing of untrusted output for the job page never yields markup
// control characters or invalid text.
func FuzzCleanOutput(f *testing.F) {
	for _, s := range []string{"", "plain\n", "\x1b[31mred\x1b[0m", "\x1b]0;t\x07", "a\rb\r\n", "\xff\xfe", "\x1b", "\x1b[", "\u009b31m"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkCleanOutput(t, in, CleanOutput(in))
	})
}

// Form fields are untrusted: the parsers never panic, and what they
// accept is in range.
func FuzzParseFields(f *testing.F) {
	for _, s := range []string{"", "none", "NONE", "0", "4", "-1", "99999999999999999999", "a,b c", "a\x00b", ",,,", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if n, err := ParseCeiling(v); err == nil && n < -1 {
			t.Fatalf("ParseCeiling(%q) = %d", v, n)
		}
		if pools, err := ParsePools(v); err == nil {
			for _, p := range pools {
				if p == "" || strings.ContainsAny(p, ", \t\r\n") {
					t.Fatalf("ParsePools(%q) has pool %q", v, p)
				}
			}
		}
	})
}

// Any POST body to any form, with a valid token or not, is answered
// without a panic or a 5xx; only a 303 writes an audit entry, exactly one.
func FuzzForms(f *testing.F) {
	actions := []string{"/nodes/n1/pools", "/nodes/n1/ceiling", "/nodes/n1/drain",
		"/gitlab/gitlab.example.com/approval", "/gitlab/gitlab.example.com/projects/12/approval"}
	f.Add(uint8(0), "pools=a,b", true)
	f.Add(uint8(1), "ceiling=3", true)
	f.Add(uint8(1), "ceiling=-5", true)
	f.Add(uint8(2), "drain=on", false)
	f.Add(uint8(3), "state=approved", true)
	f.Add(uint8(4), "state=rejected&state=approved", true)
	f.Add(uint8(4), "%zz", true)
	f.Fuzz(func(t *testing.T, which uint8, body string, withToken bool) {
		e := newEnv(t)
		action := actions[int(which)%len(actions)]
		c := fixedSession
		s := &server{key: testKey}
		var form []string
		switch int(which) % len(actions) {
		case 0, 1, 2:
			form = []string{"node." + strings.Split(action, "/")[3], "n1"}
		case 3:
			form = []string{formApproval, "gitlab.example.com", "0"}
		case 4:
			form = []string{formApproval, "gitlab.example.com", "12"}
		}
		if withToken {
			body += "&" + csrfField + "=" + url.QueryEscape(s.csrfToken("alice", c, form...))
		}
		r := httptest.NewRequest("POST", action, strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:1"
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: c})
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("POST %s %q = %d", action, body, w.Code)
		}
		es, _ := e.st.ListAudit(t.Context(), 0)
		if (w.Code == 303) != (len(es) == 1) || len(es) > 1 {
			t.Fatalf("POST %s %q = %d with %d audit entries", action, body, w.Code, len(es))
		}
	})
}
