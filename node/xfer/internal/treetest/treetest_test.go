package treetest

import (
	"maps"
	"testing"
)

// What Write makes, Read gives back: files with their contents, symlinks
// as "->target", nested directories made on the way and not listed.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := map[string]string{"a.txt": "one", "sub/deep/b.txt": "two", "sub/link": "->../a.txt", "empty": ""}
	Write(t, dir, want)
	if got := Read(t, dir); !maps.Equal(got, want) {
		t.Errorf("Read = %v, want %v", got, want)
	}
}
