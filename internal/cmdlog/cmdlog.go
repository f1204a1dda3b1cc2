// Package cmdlog makes the logger of vk's binaries (vk-hub, vk node,
// vk-gitlab) from their --log-format and --log-level flags, so the three
// read the flags alike and say the same thing about a bad value.
package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
)

// New returns a logger writing to w in format ("text" or "json") at level
// ("debug", "info", "warn", "error", as slog.Level reads it). Errors name
// the flag. A key is written once per line (the last value given wins)
// and nil values (err=<nil>) are left out.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(&tidy{next: slog.NewTextHandler(w, opts)}), nil
	case "json":
		return slog.New(&tidy{next: slog.NewJSONHandler(w, opts)}), nil
	}
	return nil, errors.New("--log-format: want text or json")
}

// tidy is the binaries' handler in front of slog's text or JSON one: a
// key given again replaces the earlier value instead of appearing twice
// (a session's logger adds component=hub-session to the hub's
// component=hub), and an attribute whose value is a nil error or nil
// pointer ("err", nil) is left out rather than written as err=<nil>.
// It keeps its attributes until a record is written; groups are passed
// through (vk's loggers use none).
type tidy struct {
	next  slog.Handler
	attrs []slog.Attr
}

func (h *tidy) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *tidy) WithAttrs(as []slog.Attr) slog.Handler {
	return &tidy{next: h.next, attrs: merge(slices.Clone(h.attrs), as)}
}

func (h *tidy) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &tidy{next: h.next.WithAttrs(h.attrs).WithGroup(name)}
}

func (h *tidy) Handle(ctx context.Context, r slog.Record) error {
	var rs []slog.Attr
	r.Attrs(func(a slog.Attr) bool { rs = append(rs, a); return true })
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(merge(slices.Clone(h.attrs), rs)...)
	return h.next.Handle(ctx, out)
}

// merge appends as to to, replacing an attribute of to with the same key
// in place and dropping nil values.
func merge(to, as []slog.Attr) []slog.Attr {
	for _, a := range as {
		if isNil(a.Value) {
			continue
		}
		if i := slices.IndexFunc(to, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 {
			to[i] = a
			continue
		}
		to = append(to, a)
	}
	return to
}

func isNil(v slog.Value) bool {
	if v.Kind() != slog.KindAny {
		return false
	}
	x := v.Any()
	if x == nil {
		return true
	}
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
