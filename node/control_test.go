package node

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// The operator's control socket: status, quarantine (which releases the
// held reservation and tells the hub), ready, drain; unknown commands are
// refused; the socket is 0600 and gone after the agent stops.
//
// spec: NODE-05
func TestControlSocket(t *testing.T) {
	h, a := connected(t, nil, Options{})
	dir := a.cfg.Node.StateDir
	sock := filepath.Join(dir, ControlSocket)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket mode %v, want a 0600 socket", fi.Mode())
	}
	holdOne(h, a)

	st, err := Control(t.Context(), dir, CmdStatus)
	if err != nil || st.State != "ready" || st.Reservations != 1 || !st.Connected {
		t.Fatalf("status = %+v, %v; want ready with 1 reservation, connected", st, err)
	}

	from := h.mark()
	st, err = Control(t.Context(), dir, CmdQuarantine)
	if err != nil || st.State != "quarantined" || st.Reservations != 0 {
		t.Fatalf("quarantine = %+v, %v; want quarantined, no reservation", st, err)
	}
	l, _ := waitFor(h, from, func(l *dispatch.Lease) bool { return l.Reservation == "r-first" })
	if l.State != dispatch.LeaseGone || l.Why != dispatch.GoneReleased {
		t.Errorf("quarantine sent %+v, want lease gone released (NODE-05)", l)
	}
	from = h.mark()
	h.send(&dispatch.Offer{Reservation: "r-q", Envelope: env1, LeaseSecs: 90})
	if rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-q" }); rep.Reply != dispatch.ReplyRefused {
		t.Errorf("offer while quarantined: %+v, want refused", rep)
	}

	if st, err = Control(t.Context(), dir, CmdReady); err != nil || st.State != "ready" {
		t.Fatalf("ready = %+v, %v", st, err)
	}
	// Nothing held or running: drain ends drained at once.
	if st, err = Control(t.Context(), dir, CmdDrain); err != nil || st.State != "drained" {
		t.Fatalf("drain = %+v, %v; want drained", st, err)
	}
	if st, err = Control(t.Context(), dir, "reboot"); !errors.Is(err, ErrControl) || st.State != "drained" || st.Error == "" {
		t.Errorf("unknown command: %+v, %v; want refused with the state unchanged", st, err)
	}

	ctx := t.Context()
	a.Shutdown(ctx)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left after shutdown: %v", err)
	}
	if _, err := Control(ctx, dir, CmdStatus); !errors.Is(err, ErrControl) {
		t.Errorf("status without an agent: %v, want ErrControl", err)
	}
}

// Draining with a held reservation keeps it until it lapses (NODE-05) and
// reports draining, not drained.
//
// spec: NODE-05
func TestControlDrainKeepsReservation(t *testing.T) {
	h, a := connected(t, nil, Options{})
	holdOne(h, a)
	st, err := Control(t.Context(), a.cfg.Node.StateDir, CmdDrain)
	if err != nil || st.State != "draining" || st.Reservations != 1 {
		t.Fatalf("drain = %+v, %v; want draining with the reservation held", st, err)
	}
}

// The control socket is bound privately and moved into place; when the
// move fails the agent must hear of it rather than serve on a socket
// nobody can reach, and no temporary directory is left behind.
func TestListenPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ControlSocket)
	ul, err := listenPrivate(dir, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat %s = %v, %v; want a 0600 socket", path, fi, err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the moved socket: %v", err)
	}
	c.Close()

	bad := t.TempDir()
	ul2, err := listenPrivate(bad, filepath.Join(bad, "missing", ControlSocket))
	if err == nil {
		ul2.Close()
		t.Fatal("listenPrivate into a missing directory succeeded; want the rename's error")
	}
	if ents, _ := os.ReadDir(bad); len(ents) != 0 {
		t.Errorf("left behind after a failed listen: %v", ents)
	}
}
