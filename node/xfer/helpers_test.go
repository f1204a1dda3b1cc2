package xfer

import (
	"context"
	"io"
	"testing"

	"github.com/vk-ci/vk/node/xfer/artifacts"
	"github.com/vk-ci/vk/node/xfer/fileset"
)

func writeZipOf(t *testing.T, w io.Writer, dir string) error {
	t.Helper()
	es, _, err := fileset.Collect(context.Background(), dir, fileset.Spec{Paths: []string{"."}})
	if err != nil {
		return err
	}
	return artifacts.WriteZip(context.Background(), w, dir, es)
}
