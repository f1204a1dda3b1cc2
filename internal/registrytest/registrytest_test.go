package registrytest

import (
	"net/http"
	"testing"
)

func get(t *testing.T, url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestStartStopStart(t *testing.T) {
	r := New(t)
	if code, err := get(t, r.URL()+"/v2/"); err != nil || code != 200 {
		t.Fatalf("GET /v2/ = %d, %v; want 200", code, err)
	}
	r.Stop()
	if _, err := get(t, r.URL()+"/v2/"); err == nil {
		t.Fatal("GET /v2/ after Stop succeeded, want a connection error")
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if code, err := get(t, r.URL()+"/v2/"); err != nil || code != 200 {
		t.Fatalf("GET /v2/ after restart = %d, %v; want 200", code, err)
	}
}
