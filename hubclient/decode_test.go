package hubclient

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/proto/client"
)

// Error bodies decode leniently: unknown codes read as other, unknown
// fields are ignored, a missing or foreign body is code other.
//
// spec: API-55
func TestDecodeError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   client.Error
	}{
		{"full", 403, nil, `{"error":"wait","code":"approval_pending","approval_url":"https://hub/gitlab/x/projects/7"}`,
			client.Error{Error: "wait", Code: client.CodeApprovalPending, ApprovalURL: "https://hub/gitlab/x/projects/7"}},
		{"retry after", 503, nil, `{"error":"busy","code":"unavailable","retry_after_secs":4}`,
			client.Error{Error: "busy", Code: client.CodeUnavailable, RetryAfterSecs: 4}},
		{"unknown code and fields", 409, nil, `{"error":"x","code":"new_thing","more":{"a":1}}`,
			client.Error{Error: "x", Code: client.CodeOther}},
		{"empty body", 500, nil, ``, client.Error{Error: "Internal Server Error", Code: client.CodeOther}},
		{"html", 502, nil, `<html>oops</html>`, client.Error{Error: `Bad Gateway: "<html>oops</html>"`, Code: client.CodeOther}},
		{"json without code", 404, nil, `{"error":"x"}`, client.Error{Error: "Not Found", Code: client.CodeOther}},
		{"Retry-After header", 503, http.Header{"Retry-After": {"9"}}, `{"error":"busy","code":"unavailable"}`,
			client.Error{Error: "busy", Code: client.CodeUnavailable, RetryAfterSecs: 9}},
		{"body wins over header", 503, http.Header{"Retry-After": {"9"}}, `{"error":"b","code":"no_capacity","retry_after_secs":2}`,
			client.Error{Error: "b", Code: client.CodeNoCapacity, RetryAfterSecs: 2}},
		{"negative retry", 503, http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}, `{"error":"b","code":"unavailable","retry_after_secs":-3}`,
			client.Error{Error: "b", Code: client.CodeUnavailable}},
	}
	for _, tt := range tests {
		got := DecodeError(tt.status, tt.header, []byte(tt.body))
		if got.Status != tt.status {
			t.Errorf("%s: status %d", tt.name, got.Status)
		}
		if d := cmp.Diff(tt.want, got.Body); d != "" {
			t.Errorf("%s: DecodeError (-want +got):\n%s", tt.name, d)
		}
	}
}

func FuzzDecodeError(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"error":"x","code":"unavailable","retry_after_secs":3}`,
		`{"code":"approval_pending","approval_url":"u"}`, `{"code":5}`, `[1,2]`, `<html>`, `{"code":"zz","retry_after_secs":-1e9}`,
		`{"error":"` + strings.Repeat("a", 300) + `","code":"internal"}`} {
		f.Add(503, "2", []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		se := DecodeError(status, h, body)
		if se == nil || se.Status != status {
			t.Fatalf("DecodeError lost the status: %+v", se)
		}
		if se.Body.Code == "" {
			t.Fatalf("empty code for %q", body)
		}
		if se.Body.RetryAfterSecs < 0 {
			t.Fatalf("negative retry_after_secs %d", se.Body.RetryAfterSecs)
		}
		switch se.Body.Code {
		case client.CodeInvalid, client.CodeUnauthorized, client.CodeForbidden, client.CodeApprovalPending,
			client.CodeProjectRejected, client.CodeNotFound, client.CodeConflict, client.CodeReservationGone,
			client.CodeTooLarge, client.CodeInternal, client.CodeNoCapacity, client.CodeUnavailable, client.CodeOther:
		default:
			t.Fatalf("code %q is not a known code or other", se.Body.Code)
		}
		_ = se.Error()
		_ = se.Retryable()
	})
}
