package hubclient

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vk-ci/vk/reqsign"
)

// Files of an enrolment under <state_dir>/hub/ (AUTH-02, AUTH-09). The
// directory is mode 0700, the files 0600.
const (
	// HubDir is the enrolment's directory inside the state directory.
	HubDir = "hub"
	// KeyFile is the principal's ed25519 key, PKCS#8 PEM.
	KeyFile = "key.pk8"
	// CAFile is the hub's CA, PEM, pinned for every connection.
	CAFile = "ca.pem"
	// EnrolmentFile holds the hub URL, principal ID and kind, as JSON. It
	// is written last and removed first, so its presence means enrolled.
	EnrolmentFile = "enrolment.json"
)

// Sentinel errors of the enrolment state.
var (
	// ErrNotEnrolled: no enrolment under the state directory.
	ErrNotEnrolled = errors.New("hubclient: not enrolled with a hub")
	// ErrAlreadyEnrolled: join without replace found an enrolment.
	ErrAlreadyEnrolled = errors.New("hubclient: already enrolled; use join --replace")
	// ErrBusy: join or leave refused while a job is recorded (AUTH-10).
	ErrBusy = errors.New("hubclient: jobs are still recorded")
)

// BusyCheck reports whether the caller's state files still record a job:
// nil when none, else an error describing what is recorded (e.g. "runner
// x: 2 jobs in /var/lib/vk-gitlab/x.state"). The relay passes one that
// reads its state files; a node its journal. nil means never busy.
type BusyCheck func() error

// Enrolment is a principal's enrolment with one hub, as kept on disk.
type Enrolment struct {
	// HubURL is the hub's base URL.
	HubURL string `json:"hub_url"`
	// ID is the principal ID the hub assigned.
	ID string `json:"id"`
	// Kind is KindGitLab or KindNode.
	Kind string `json:"kind"`
	// Joined is when the join succeeded (UTC).
	Joined time.Time `json:"joined"`
	// CAPEM is the pinned CA (in CAFile, not in the JSON).
	CAPEM []byte `json:"-"`
	// Key is the principal's key (in KeyFile, not in the JSON).
	Key ed25519.PrivateKey `json:"-"`
}

// Config returns a client [Config] for this enrolment; the caller adds
// Clock, Log and the like.
func (e Enrolment) Config() Config {
	return Config{HubURL: e.HubURL, CAPEM: e.CAPEM, Key: e.Key, Principal: e.ID}
}

// Dir returns <stateDir>/hub.
func Dir(stateDir string) string { return filepath.Join(stateDir, HubDir) }

// JoinOptions are the inputs of [JoinAndSave].
type JoinOptions struct {
	// HubURL, Token, CAPEM (nil: trust on first use), Name and Kind are
	// passed to [Join].
	HubURL, Token string
	CAPEM         []byte
	Name, Kind    string
	// Replace allows replacing an existing enrolment (join --replace).
	Replace bool
	// Busy is checked before anything else (AUTH-10).
	Busy BusyCheck
	// Now stamps Joined; nil means time.Now.
	Now func() time.Time
}

// JoinAndSave is `join`: it refuses while Busy reports a recorded job
// (AUTH-10) or, without Replace, when already enrolled — both checked
// before the token is spent — then calls [Join] and saves the result
// under <stateDir>/hub/ (AUTH-09).
func JoinAndSave(ctx context.Context, stateDir string, o JoinOptions) (Enrolment, JoinResult, error) {
	if err := checkBusy(o.Busy, "join"); err != nil {
		return Enrolment{}, JoinResult{}, err
	}
	if _, err := os.Stat(filepath.Join(Dir(stateDir), EnrolmentFile)); err == nil && !o.Replace {
		return Enrolment{}, JoinResult{}, fmt.Errorf("%w (%s)", ErrAlreadyEnrolled, Dir(stateDir))
	}
	res, key, err := Join(ctx, o.HubURL, o.Token, o.CAPEM, o.Name, o.Kind)
	if err != nil {
		return Enrolment{}, res, err
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	e := Enrolment{HubURL: o.HubURL, ID: res.ID, Kind: o.Kind, Joined: now().UTC(), CAPEM: res.CAPEM, Key: key}
	if err := SaveEnrolment(stateDir, e); err != nil {
		return Enrolment{}, res, err
	}
	return e, res, nil
}

// SaveEnrolment writes e under <stateDir>/hub/: the directory mode 0700
// (tightened if it exists), key.pk8, ca.pem and enrolment.json mode 0600,
// each written atomically, enrolment.json last (AUTH-09).
func SaveEnrolment(stateDir string, e Enrolment) error {
	if e.ID == "" || e.HubURL == "" || len(e.Key) != ed25519.PrivateKeySize || len(e.CAPEM) == 0 {
		return fmt.Errorf("%w: enrolment needs hub URL, ID, key and CA", ErrConfig)
	}
	dir := Dir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("hubclient: save enrolment: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("hubclient: save enrolment: %w", err)
	}
	if err := reqsign.SaveKey(filepath.Join(dir, KeyFile), e.Key); err != nil {
		return fmt.Errorf("hubclient: save enrolment: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, CAFile), e.CAPEM); err != nil {
		return err
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("hubclient: save enrolment: %w", err)
	}
	return writeAtomic(filepath.Join(dir, EnrolmentFile), append(b, '\n'))
}

// LoadEnrolment reads the enrolment under <stateDir>/hub/. It returns an
// error wrapping [ErrNotEnrolled] when there is none, and refuses a
// directory or key readable by group or others.
func LoadEnrolment(stateDir string) (Enrolment, error) {
	dir := Dir(stateDir)
	b, err := os.ReadFile(filepath.Join(dir, EnrolmentFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Enrolment{}, fmt.Errorf("%w (no %s)", ErrNotEnrolled, filepath.Join(dir, EnrolmentFile))
	}
	if err != nil {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment: %w", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return Enrolment{}, fmt.Errorf("hubclient: %s has mode %v; want 0700", dir, fi.Mode().Perm())
	}
	var e Enrolment
	if err := json.Unmarshal(b, &e); err != nil {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment %s: %w", filepath.Join(dir, EnrolmentFile), err)
	}
	if e.ID == "" || e.HubURL == "" {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment %s: hub_url or id missing", filepath.Join(dir, EnrolmentFile))
	}
	if e.Key, err = reqsign.LoadKey(filepath.Join(dir, KeyFile)); err != nil {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment: %w", err)
	}
	if e.CAPEM, err = os.ReadFile(filepath.Join(dir, CAFile)); err != nil {
		return Enrolment{}, fmt.Errorf("hubclient: load enrolment: %w", err)
	}
	return e, nil
}

// Leave is `leave`: refused while busy reports a recorded job (AUTH-10),
// it deletes the enrolment files and their directory (AUTH-09). Leaving
// when not enrolled returns an error wrapping [ErrNotEnrolled]. The hub
// keeps the principal until an operator removes it (`vk-hub relays
// remove`).
func Leave(stateDir string, busy BusyCheck) error {
	if err := checkBusy(busy, "leave"); err != nil {
		return err
	}
	dir := Dir(stateDir)
	if _, err := os.Stat(filepath.Join(dir, EnrolmentFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (no %s)", ErrNotEnrolled, filepath.Join(dir, EnrolmentFile))
	}
	for _, f := range []string{EnrolmentFile, KeyFile, CAFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hubclient: leave: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hubclient: leave: %s: %w", dir, err)
	}
	return nil
}

func checkBusy(busy BusyCheck, what string) error {
	if busy == nil {
		return nil
	}
	if err := busy(); err != nil {
		return fmt.Errorf("%w: %s refused until those jobs end or their state file is removed: %w", ErrBusy, what, err)
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("hubclient: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("hubclient: write %s: %w", path, err)
	}
	return nil
}
