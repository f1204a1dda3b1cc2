package hub

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/internal/relsign"
	"github.com/vk-ci/vk/proto/client"
)

// A published release is kept whole under <state_dir>/releases with its
// record in the store; another instance sharing the store but not the
// bytes refuses to serve it and says why; bad names, empty bodies and a
// missing signature are refused.
//
// spec: OPS-04
func TestReleaseStore(t *testing.T) {
	st := memstore.New()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := newReleaseStore(dirA, st, nil), newReleaseStore(dirB, st, nil)
	ctx := t.Context()
	bin := bytes.Repeat([]byte("release "), 10000)
	rec, err := a.Publish(ctx, "0.5.0", "c2lnbmF0dXJl\n", bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	sum, n, _ := relsign.Digest(bytes.NewReader(bin))
	if rec.SHA256 != sum || rec.Size != n || rec.Signature != "c2lnbmF0dXJl" {
		t.Fatalf("record %+v, want sha %s size %d", rec, sum, n)
	}
	f, got, err := a.Open(ctx, "0.5.0")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(b2, bin) || got != rec {
		t.Fatalf("served %d bytes %+v", len(b2), got)
	}
	if left, _ := filepath.Glob(filepath.Join(dirA, ReleasesDir, "0.5.0", ".upload-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if rs, err := b.List(ctx); err != nil || len(rs) != 1 {
		t.Fatalf("the other instance lists %v, %v", rs, err)
	}
	if _, _, err := b.Open(ctx, "0.5.0"); !errors.Is(err, errReleaseNotHere) || !strings.Contains(err.Error(), "publish it again") {
		t.Fatalf("the other instance opened it: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dirA, ReleasesDir, "0.5.0", "vk-gitlab"), []byte("truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Open(ctx, "0.5.0"); !errors.Is(err, errReleaseNotHere) {
		t.Fatalf("changed bytes served: %v", err)
	}
	if _, _, err := a.Open(ctx, "0.6.0"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("unpublished release: %v", err)
	}
	for _, tc := range []struct{ version, sig, body string }{
		{"../etc", "c2ln", "x"}, {"", "c2ln", "x"}, {"a/b", "c2ln", "x"}, {"0.7.0", "", "x"}, {"0.7.0", "c2ln", ""},
	} {
		if _, err := a.Publish(ctx, tc.version, tc.sig, strings.NewReader(tc.body)); !errors.Is(err, admin.ErrInvalid) {
			t.Errorf("Publish(%q, %q, %d bytes) = %v, want invalid", tc.version, tc.sig, len(tc.body), err)
		}
	}
}

// relays update sends the update frame only to a connected relay whose
// report allows updates, with the release's record and download path;
// otherwise it says why, and sends nothing.
//
// spec: OPS-04
func TestUpdateRelayFrame(t *testing.T) {
	h := newHarness(t)
	d := h.srv.Driver()
	upd := relayUpdates{rs: newReleaseStore(t.TempDir(), memstore.New(), nil), d: d}
	ctx := t.Context()
	rec, err := upd.Publish(ctx, "0.5.0", "c2ln", strings.NewReader("binary"))
	if err != nil {
		t.Fatal(err)
	}
	if err := upd.UpdateRelay(ctx, h.relay, "0.5.0"); !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), "no session") {
		t.Fatalf("update of a relay without a session: %v", err)
	}
	h.relayUp(1)
	if err := upd.UpdateRelay(ctx, h.relay, "0.5.0"); !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), "[hub] allow") {
		t.Fatalf("update of a relay that does not allow it: %v", err)
	}
	if err := upd.UpdateRelay(ctx, h.relay, "0.6.0"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("update to an unpublished release: %v", err)
	}
	rep := &client.RelayReport{Release: "0.4.9", Concurrent: 10, Allow: []string{client.RelayAllowUpdate},
		Runners: []client.RunnerReport{{Name: "r1", Placement: testPlacement, RequestConcurrency: 1, TokenAccepted: true}}}
	if err := d.RelayFrame(ctx, h.relay, rep); err != nil {
		t.Fatal(err)
	}
	for len(h.rsend.frames) > 0 {
		<-h.rsend.frames // the server statuses so far
	}
	if err := upd.UpdateRelay(ctx, h.relay, "0.5.0"); err != nil {
		t.Fatal(err)
	}
	var got *client.Update
	for got == nil {
		select {
		case m := <-h.rsend.frames:
			got, _ = m.(*client.Update)
		case <-time.After(10 * time.Second):
			t.Fatal("no update frame sent")
		}
	}
	want := client.Update{Release: "0.5.0", URL: "/v1/releases/0.5.0/vk-gitlab", SHA256: rec.SHA256, Size: 6, Signature: "c2ln"}
	if *got != want {
		t.Fatalf("frame %+v, want %+v", *got, want)
	}
	if m, err := upd.RelayReleases(ctx); err != nil || m[h.relay] != "0.4.9" {
		t.Fatalf("RelayReleases = %v, %v", m, err)
	}
}
