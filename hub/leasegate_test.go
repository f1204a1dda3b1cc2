package hub

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vk-ci/vk/proto/client"
)

// A leader's answer goes out only if its lease is still held when the
// answer is written: an answer computed while held but written after the
// deadline (the process paused in between) is replaced by 503
// unavailable, with none of the handler's headers or bytes.
//
// spec: BS-11, BS-12
func TestLeaseGatedAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		heldAtEnd  bool
		implicit   bool // the handler writes its body without WriteHeader
		wantStatus int
	}{
		{"held", true, false, http.StatusOK},
		{"held, implicit 200", true, true, http.StatusOK},
		{"expired while answering", false, false, http.StatusServiceUnavailable},
		{"expired, implicit 200", false, true, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := true
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				view := `{"id":"0123456789abcdef","revision":7,"state":"running"}` // read while held
				held = tc.heldAtEnd                                                // then the pause
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-From-Handler", "1")
				if !tc.implicit {
					w.WriteHeader(http.StatusOK)
				}
				w.Write([]byte(view))
				w.(http.Flusher).Flush()
			})
			rec := httptest.NewRecorder()
			h.ServeHTTP(&leaseGated{ResponseWriter: rec, held: func() bool { return held }}, httptest.NewRequest("GET", "/v1/jobs/x", nil))
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusOK {
				if rec.Body.String() != `{"id":"0123456789abcdef","revision":7,"state":"running"}` || rec.Header().Get("X-From-Handler") != "1" {
					t.Fatalf("answer let through changed: %q %v", rec.Body, rec.Header())
				}
				return
			}
			var e client.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != client.CodeUnavailable {
				t.Fatalf("body %q (%v), want one unavailable error and nothing of the handler's", rec.Body, err)
			}
			if rec.Header().Get("X-From-Handler") != "" || rec.Header().Get("Retry-After") != "1" {
				t.Fatalf("headers %v, want the handler's gone and Retry-After 1", rec.Header())
			}
		})
	}
}
