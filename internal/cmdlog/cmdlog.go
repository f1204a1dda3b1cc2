// Package cmdlog makes the logger of vk's binaries (vk-hub, vk node,
// vk-gitlab) from their --log-format and --log-level flags, so the three
// read the flags alike and say the same thing about a bad value.
package cmdlog

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
)

// New returns a logger writing to w in format ("text" or "json") at level
// ("debug", "info", "warn", "error", as slog.Level reads it). Errors name
// the flag.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, errors.New("--log-format: want text or json")
}
