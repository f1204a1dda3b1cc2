package cache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/registrytest"
)

// benchTree writes n files of size bytes: half from a seeded PRNG
// (incompressible, like compiled objects), half repetitive text (like
// sources and lockfiles).
func benchTree(b *testing.B, dir string, n, size int) int64 {
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	text := bytes.Repeat([]byte("module vk // dependency cache line\n"), size/35+1)[:size]
	buf := make([]byte, size)
	var total int64
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, "vendor", fmt.Sprintf("pkg%02d", i%20), fmt.Sprintf("f%03d", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		data := text
		if i%2 == 0 {
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			data = buf
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(size)
	}
	return total
}

// BenchmarkCache measures cache save (archive + upload) and restore
// (download + extract) of a 200 MB tree against the real local registry.
// Run: go test ./node/xfer/cache -run XXX -bench Cache -benchtime=1x
func BenchmarkCache(b *testing.B) {
	reg := registrytest.New(b)
	src := b.TempDir()
	total := benchTree(b, src, 200, 1<<20)
	st := &Store{Registry: reg.Addr, PlainHTTP: true, TempDir: b.TempDir()}
	spec := Spec{Key: "bench", Paths: []string{"vendor"}}
	b.Run("save", func(b *testing.B) {
		b.SetBytes(total)
		i := 0
		for b.Loop() {
			// A new mtime makes a new layer: every iteration uploads.
			mt := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
			os.Chtimes(filepath.Join(src, "vendor/pkg00/f000"), mt, mt)
			i++
			if res := st.Archive(b.Context(), Request{Scope: scope, Caches: []Spec{spec}, Dir: src}); res[0].Outcome != Saved {
				b.Fatalf("Archive = %+v", res)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			if res := st.Archive(b.Context(), Request{Scope: scope, Caches: []Spec{spec}, Dir: src}); res[0].Outcome != Unchanged {
				b.Fatalf("Archive = %+v", res)
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			dst := b.TempDir()
			if res := st.Restore(b.Context(), Request{Scope: scope, Caches: []Spec{spec}, Dir: dst}); res[0].Outcome != Restored {
				b.Fatalf("Restore = %+v", res)
			}
		}
	})
}
