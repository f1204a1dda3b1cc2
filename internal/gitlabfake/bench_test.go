package gitlabfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func benchDo(b *testing.B, method, url string, hdr map[string]string, body []byte) (int, []byte) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// BenchmarkJobCycle measures one job's GitLab-side life over loopback HTTP:
// job request (201), accept PUT, one 1 KiB trace PATCH, final PUT.
func BenchmarkJobCycle(b *testing.B) {
	s := New(Options{Logger: discard()})
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateProject("acme/bench", map[string]string{"a": "b"}, ProjectOptions{}); err != nil {
		b.Fatal(err)
	}
	jobs := make([]JobSpec, b.N)
	for i := range jobs {
		jobs[i] = JobSpec{Name: fmt.Sprintf("j%d", i), Script: []string{"true"}}
	}
	if _, err := s.CreatePipeline("acme/bench", PipelineSpec{Jobs: jobs}); err != nil {
		b.Fatal(err)
	}
	reqBody := []byte(fmt.Sprintf(`{"token":%q,"info":{"features":{"cancel_gracefully":true}}}`, s.RunnerToken()))
	chunk := strings.Repeat("x", 1023) + "\n"
	final := fmt.Sprintf(`{"state":"success","output":{"checksum":%q,"bytesize":1024}}`, checksum([]byte(chunk)))
	b.ResetTimer()
	for range b.N {
		st, body := benchDo(b, "POST", s.URL()+"/api/v4/jobs/request", map[string]string{"Content-Type": "application/json"}, reqBody)
		if st != 201 {
			b.Fatalf("request = %d", st)
		}
		var j struct {
			ID    int64  `json:"id"`
			Token string `json:"token"`
		}
		json.Unmarshal(body, &j)
		h := map[string]string{"JOB-TOKEN": j.Token, "Content-Type": "application/json"}
		base := fmt.Sprintf("%s/api/v4/jobs/%d", s.URL(), j.ID)
		benchDo(b, "PUT", base, h, []byte(`{"state":"running","output":{}}`))
		h["Content-Range"] = "0-1023"
		if st, _ := benchDo(b, "PATCH", base+"/trace?debug_trace=false", h, []byte(chunk)); st != 202 {
			b.Fatalf("patch = %d", st)
		}
		if st, _ := benchDo(b, "PUT", base, h, []byte(final)); st != 200 {
			b.Fatalf("final = %d", st)
		}
	}
}
