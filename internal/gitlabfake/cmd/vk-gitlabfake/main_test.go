package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestRunDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--runner-token", "glrt-t1_demo", "--demo"}, pw)
		pw.Close()
	}()
	vals := map[string]string{}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			k, v, _ := strings.Cut(f, "=")
			vals[k] = v
		}
		if vals["project"] != "" {
			break
		}
	}
	if vals["runner_token"] != "glrt-t1_demo" || !strings.HasPrefix(vals["url"], "http://127.0.0.1:") || vals["project"] != "demo/hello" ||
		vals["jobs"] != vals["url"]+"/-/jobs" {
		t.Fatalf("output = %v", vals)
	}
	body := fmt.Sprintf(`{"token":%q,"info":{"features":{}}}`, vals["runner_token"])
	resp, err := http.Post(vals["url"]+"/api/v4/jobs/request", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("demo job request = %d, want 201", resp.StatusCode)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// --version prints the version and serves nothing, as every vk binary's.
func TestVersionFlag(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"--version"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "vk-gitlabfake ") || strings.Contains(got, "url=") {
		t.Errorf("--version printed %q", got)
	}
}
