package gitlab

import (
	"net/http"
	"testing"
)

// BenchmarkDecodeJobResponse decodes the complete (Rails-shaped, 8.8 KB)
// job response.
func BenchmarkDecodeJobResponse(b *testing.B) {
	body := readFixture(b, "job_response_gitlab_complete.json")
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := DecodeJobResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMapFailureReason maps through the fallback chain against a
// current GitLab's 52 listed reasons.
func BenchmarkMapFailureReason(b *testing.B) {
	var reasons []string
	j, err := DecodeJobResponse(readFixture(b, "job_response_gitlab_complete.json"))
	if err != nil {
		b.Fatal(err)
	}
	reasons = j.Features.FailureReasons
	for b.Loop() {
		_ = MapFailureReason(ReasonImagePullFailure, reasons)
	}
}

// BenchmarkPatchTraceOutcome is the PATCH answer table alone.
func BenchmarkPatchTraceOutcome(b *testing.B) {
	h := http.Header{"Range": {"0-1024"}, "Job-Status": {"running"}, "X-Gitlab-Trace-Update-Interval": {"3"}}
	for b.Loop() {
		_, _ = patchTraceOutcome(call{}, answer{status: 202, header: h}, 0, 1024)
	}
}
