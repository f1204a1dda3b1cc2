package ui

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
)

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	need.Missingf(t, "chromium not installed (apt-get install -y chromium): the browser test needs it")
	return ""
}

// runChromium runs headless Chromium with args against url, bounded in
// time, and returns its standard output.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	home := t.TempDir()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--user-data-dir=" + filepath.Join(home, "profile"), "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %q: %v\n%s", args, err, errb.Bytes())
	}
	return out.Bytes()
}

// The Fleet page, served on loopback and rendered by a real headless
// Chromium, parses into the DOM we meant (hostile label as text, forms
// present) and paints a non-empty screenshot. VK_UI_SCREENSHOT=path keeps
// the PNG for a human to look at.
// spec: OPS-01, OPS-02
func TestBrowserFleet(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	srv := httptest.NewServer(e.h) // 127.0.0.1: LoopbackOnly admits the browser
	defer srv.Close()

	dom := string(runChromium(t, bin, "--dump-dom", srv.URL+"/"))
	for _, want := range []string{"build-1", "&lt;script&gt;alert", `action="/nodes/n1/ceiling"`, "GitLab › Servers"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the browser's DOM lacks %q", want)
		}
	}
	if strings.Contains(dom, "<script") {
		t.Errorf("the browser's DOM has a script element")
	}

	shot := filepath.Join(t.TempDir(), "fleet.png")
	runChromium(t, bin, "--window-size=1400,800", "--screenshot="+shot, srv.URL+"/")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < 800 || bounds.Dy() < 400 {
		t.Fatalf("screenshot is %v", bounds)
	}
	// A painted page has many colours: the header, badges, text.
	colours := map[[4]uint32]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 7 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 7 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	if len(colours) < 8 {
		t.Errorf("screenshot has %d colours: the page looks blank", len(colours))
	}
	// The header bar (dark) is painted across the top.
	if r, g, b, _ := img.At(bounds.Dx()-5, 5).RGBA(); r > 0x4000 || g > 0x4000 || b > 0x5000 {
		t.Errorf("top-right pixel is %x,%x,%x: no dark header, the stylesheet did not load", r, g, b)
	}
	if keep := os.Getenv("VK_UI_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot %v, %d bytes, %d colours sampled", bounds, len(b), len(colours))
}

// With VK_UI_SCREENSHOT_DIR set, every page is shot to a PNG there, for a
// human to review the look (not run otherwise).
func TestBrowserScreenshots(t *testing.T) {
	dir := os.Getenv("VK_UI_SCREENSHOT_DIR")
	if dir == "" {
		t.Skip("set VK_UI_SCREENSHOT_DIR to shoot every page")
	}
	bin := chromium(t)
	e := newEnv(t)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	for name, path := range map[string]string{"fleet": "/", "node": "/nodes/n1", "queue": "/queue", "jobs": "/jobs", "job": "/jobs/j-2",
		"servers": "/gitlab", "project": "/gitlab/gitlab.example.com/projects/12", "policy": "/policy", "audit": "/audit"} {
		runChromium(t, bin, "--window-size=1400,800", "--screenshot="+filepath.Join(dir, name+".png"), srv.URL+path)
	}
}
