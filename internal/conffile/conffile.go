// Package conffile loads vk's TOML configuration files strictly: an unknown
// key, a value of the wrong type or a missing `version` is an error that names
// the file, the line and the key, so an operator can fix it at once.
//
// Every binary's config struct carries one tag set (`toml`), holds its
// defaults before [Load] is called (defaults < file < flags), and may
// implement [Validator]; Load calls Validate after decoding.
package conffile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// ErrNoConfig is returned (wrapped) by [Load] when the file does not exist,
// so callers can fall back to defaults or say where the file should be.
var ErrNoConfig = errors.New("conffile: no config file")

// ErrVersion is returned (wrapped) when the file's `version` key is missing
// or names a version this build does not read.
var ErrVersion = errors.New("conffile: unsupported config version")

// Validator is implemented by config structs that check themselves after
// decoding. Validate must be pure and list every problem it finds.
type Validator interface {
	Validate() error
}

// Load reads the file at path and decodes it into v (a pointer to a struct
// already holding its defaults). The file must have a top-level integer
// `version` key whose value is one of versions. Errors name the path and,
// where the decoder knows them, the line, column and key.
func Load(path string, v any, versions ...int) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", path, ErrNoConfig)
	}
	if err != nil {
		return fmt.Errorf("conffile: %w", err)
	}
	return Decode(path, data, v, versions...)
}

// Decode is [Load] for bytes already read; name is used in error messages.
func Decode(name string, data []byte, v any, versions ...int) error {
	var head struct {
		Version *int `toml:"version"`
	}
	if err := toml.Unmarshal(data, &head); err != nil {
		return wrap(name, err)
	}
	if head.Version == nil {
		return fmt.Errorf("%s: missing required key \"version\" (this build reads version %s): %w", name, list(versions), ErrVersion)
	}
	if len(versions) > 0 && !slices.Contains(versions, *head.Version) {
		return fmt.Errorf("%s: key \"version\" is %d, this build reads version %s: %w", name, *head.Version, list(versions), ErrVersion)
	}
	if err := Strict(name, data, v); err != nil {
		return err
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// Strict decodes TOML data into v with no `version` key required and no
// validation: unknown keys and wrong types are errors ([*Error]) naming
// name, the line, the column and the key. For files that are not a
// binary's config (e.g. vk-sim scenarios).
func Strict(name string, data []byte, v any) error {
	dec := toml.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wrap(name, err)
	}
	return nil
}

func wrap(name string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		msgs := make([]string, 0, len(strict.Errors))
		for _, e := range strict.Errors {
			row, col := e.Position()
			msgs = append(msgs, fmt.Sprintf("%s:%d:%d: unknown key %q", name, row, col, strings.Join(e.Key(), ".")))
		}
		return &Error{msg: strings.Join(msgs, "\n"), err: err}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		if key != "" {
			return &Error{msg: fmt.Sprintf("%s:%d:%d: key %q: %s", name, row, col, key, operatorText(de.Error())), err: err}
		}
		return &Error{msg: fmt.Sprintf("%s:%d:%d: %s", name, row, col, operatorText(de.Error())), err: err}
	}
	return &Error{msg: fmt.Sprintf("%s: %v", name, err), err: err}
}

var typeErrRE = regexp.MustCompile(`^toml: cannot decode TOML (\w+) into .* of type (\S+)$`)

// operatorText turns the decoder's message into one an operator can act
// on: a type mismatch names the kind of value wanted ("want an integer,
// not a string") instead of Go's struct and field names.
func operatorText(msg string) string {
	if m := typeErrRE.FindStringSubmatch(msg); m != nil {
		article := "a"
		if strings.ContainsRune("aeiou", rune(m[1][0])) {
			article = "an"
		}
		return fmt.Sprintf("want %s, not %s %s", kindOf(m[2]), article, m[1])
	}
	return strings.TrimPrefix(msg, "toml: ")
}

// kindOf names a Go type as a kind of TOML value.
func kindOf(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]string"):
		return "a list of strings"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "struct"):
		return "a table"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	}
	return "a value of another kind (see the documentation of the key)"
}

// Error is a decoding error with the file position(s) in its message.
type Error struct {
	msg string
	err error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the decoder's own error.
func (e *Error) Unwrap() error { return e.err }

func list(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " or ")
}

// Loopback reports whether hostport is a loopback host:port ("localhost",
// 127.0.0.0/8 or ::1), as a metrics_listen key must be.
func Loopback(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
