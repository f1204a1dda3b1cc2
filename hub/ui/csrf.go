package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
)

// sessionCookie names the per-browser cookie the CSRF token is bound to.
// It carries no authority of its own: it only ties a form to the browser
// it was rendered for.
const sessionCookie = "vk_ui_session"

// sessionLen is the session cookie's length in random bytes.
const sessionLen = 18

// csrfField names the hidden form field carrying the token.
const csrfField = "csrf"

// session returns the request's session ID, making (and setting on w) a
// new one when the request has none or a malformed one.
func (s *server) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && validSession(c.Value) {
		return c.Value
	}
	b := make([]byte, sessionLen)
	rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: s.base + "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return id
}

func validSession(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == sessionLen
}

// csrfToken is the token of a form: HMAC-SHA256 under the UI's key of the
// operator, the session and the form (its kind and subject, e.g.
// "node.pools" and the node ID), base64url.
func (s *server) csrfToken(operator, session string, form ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("vk-ui-csrf-v1"))
	for _, part := range append([]string{operator, session}, form...) {
		// Length-prefix each part so no two part lists hash alike.
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		m.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the POST r carries the right token for form,
// bound to its session cookie and operator. It reads the form (bounded).
func (s *server) checkCSRF(r *http.Request, form ...string) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !validSession(c.Value) {
		return false
	}
	got := r.PostFormValue(csrfField)
	if got == "" || strings.ContainsAny(got, " \t") {
		return false
	}
	want := s.csrfToken(operatorOf(r.Context()), c.Value, form...)
	return hmac.Equal([]byte(got), []byte(want))
}
