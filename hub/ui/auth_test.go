package ui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// LoopbackOnly admits loopback peers only, whatever headers claim.
func TestLoopbackOnly(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		remote string
		xff    string
		want   int
	}{
		{"127.0.0.1:5000", "", 200},
		{"127.8.9.10:5000", "", 200},
		{"[::1]:5000", "", 200},
		{"[::ffff:127.0.0.1]:5000", "", 200},
		{"192.0.2.7:5000", "", 403},
		{"192.0.2.7:5000", "127.0.0.1", 403},
		{"[2001:db8::1]:5000", "", 403},
		{"garbage", "", 403},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("GET / from %s (X-Forwarded-For %q) = %d, want %d", tc.remote, tc.xff, w.Code, tc.want)
		}
		if tc.want == 403 && strings.Contains(w.Body.String(), "build-1") {
			t.Errorf("refused request from %s still got the page", tc.remote)
		}
	}
	// A refused POST changes nothing, even with a valid form.
	r := httptest.NewRequest("POST", "/nodes/n1/drain", strings.NewReader(url.Values{"drain": {"on"}}.Encode()))
	r.RemoteAddr = "192.0.2.7:5000"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if w.Code != 403 || len(e.be.callLog()) != 0 {
		t.Errorf("POST from a remote peer = %d with calls %q, want 403 and none", w.Code, e.be.callLog())
	}
}

// BasicAuth admits the configured token only, answers 401 with a
// challenge otherwise, and audits the user name.
func TestBasicAuth(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Operators = BasicAuth{Token: "s3cret-token"} })
	for _, tc := range []struct {
		name       string
		user, pass string
		set        bool
		want       int
	}{
		{"no credentials", "", "", false, 401},
		{"wrong token", "bob", "s3cret-tokeN", true, 401},
		{"prefix of token", "bob", "s3cret", true, 401},
		{"empty password", "bob", "", true, 401},
		{"right token", "bob", "s3cret-token", true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.7:5000" // BasicAuth does not care where from
			if tc.set {
				r.SetBasicAuth(tc.user, tc.pass)
			}
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("GET / = %d, want %d", w.Code, tc.want)
			}
			if tc.want == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), `Basic realm="vk-hub"`) {
				t.Errorf("401 without a Basic challenge: %q", w.Header().Get("WWW-Authenticate"))
			}
		})
	}
	// The user name is the operator in the audit log.
	r := httptest.NewRequest("GET", "/nodes/n1", nil)
	r.SetBasicAuth("bob", "s3cret-token")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	c := sessionOf(t, w.Result())
	tok := formToken(t, w.Body.String(), "/nodes/n1/drain")
	r = httptest.NewRequest("POST", "/nodes/n1/drain", strings.NewReader(url.Values{"drain": {"on"}, csrfField: {tok}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.SetBasicAuth("bob", "s3cret-token")
	r.AddCookie(c)
	w = httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("POST drain = %d, want 303", w.Code)
	}
	if a := e.audit(); len(a) != 1 || a[0].Actor != "bob" {
		t.Errorf("audit = %+v, want one entry by bob", a)
	}
}

func TestBasicAuthUserAndEmptyToken(t *testing.T) {
	for _, tc := range []struct {
		auth       BasicAuth
		user, pass string
		want       bool
	}{
		{BasicAuth{User: "ops", Token: "t"}, "ops", "t", true},
		{BasicAuth{User: "ops", Token: "t"}, "bob", "t", false},
		{BasicAuth{}, "", "", false},
		{BasicAuth{Token: "t"}, "", "t", true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(tc.user, tc.pass)
		op, ok := tc.auth.Authenticate(r)
		if ok != tc.want {
			t.Errorf("%+v.Authenticate(%q, %q) = %q, %t; want %t", tc.auth, tc.user, tc.pass, op, ok, tc.want)
		}
		if ok && op == "" {
			t.Errorf("admitted with no operator name")
		}
	}
	if s := (BasicAuth{Token: "s3cret"}).LogValue().String(); strings.Contains(s, "s3cret") {
		t.Errorf("LogValue leaks the token: %s", s)
	}
}

// The session cookie the CSRF token binds to is HttpOnly, SameSite=Strict,
// scoped to the UI, kept once set, and Secure over TLS.
func TestSessionCookie(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BasePath = "/ui" })
	_, resp := e.get("/ui/", http.StatusOK)
	c := sessionOf(t, resp)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.Secure {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path /ui/, not Secure over plain HTTP", c)
	}
	if _, resp := e.get("/ui/queue", http.StatusOK, c); len(resp.Cookies()) != 0 {
		t.Errorf("a request with a session got a new cookie: %v", resp.Cookies())
	}
	r := httptest.NewRequest("GET", "https://hub.example/ui/", nil)
	r.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if c := sessionOf(t, w.Result()); !c.Secure {
		t.Errorf("cookie over TLS is not Secure")
	}
}
