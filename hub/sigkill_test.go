package hub

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// childConfigEnv names a hub.toml for a re-executed test binary, which
// then runs that hub as a child process (TestMain).
const childConfigEnv = "VK_HUB_TEST_CHILD_CONFIG"

func TestMain(m *testing.M) {
	if c := os.Getenv(childConfigEnv); c != "" {
		os.Exit(runChildHub(c))
	}
	os.Exit(m.Run())
}

// runChildHub runs the hub of the config file until killed, printing
// "leading <addr>" once it leads.
func runChildHub(path string) int {
	cfg, err := LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-s.Leading()
	fmt.Printf("leading %s\n", s.Addr())
	<-s.done
	return 1
}

// startChildHub runs a leased hub on dsn as a child process of the test
// binary (a hub.toml in stateDir) and waits for it to lead; it returns
// the process and its address.
func startChildHub(t *testing.T, stateDir, instance, dsn string, ttlMillis int) (*os.Process, string) {
	t.Helper()
	toml := fmt.Sprintf("version = 1\naddr = \"127.0.0.1:0\"\nstate_dir = %q\nimmediate_wait_ms = 0\n\n"+
		"[store]\nkind = \"postgres\"\ndsn = %q\nlease = true\nlease_ttl_ms = %d\ninstance = %q\n",
		stateDir, dsn, ttlMillis, instance)
	path := filepath.Join(stateDir, "hub.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childConfigEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child hub: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "leading ")
	if !ok {
		t.Fatalf("child hub said %q", line)
	}
	return cmd.Process, addr
}

// The leader is a real process, SIGKILLed while a standby holds the same
// node's session: the lease (not released) expires on the database's
// clock, and the standby takes over and places work on the node it
// already had a session with.
//
// spec: BS-10, BS-12, BS-13, BS-15
func TestFailoverSIGKILL(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	const ttlMillis = 1500
	aDir := t.TempDir()
	proc, addr := startChildHub(t, aDir, "hub-a", dsn, ttlMillis)
	b := startHA(t, haConfig(t, "hub-b", dsn, ttlMillis))

	// Principals go straight into the database, as `vk-hub token create`
	// and a join on the leader would put them.
	st, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := newHAPeers(t, st)
	caA, err := os.ReadFile(filepath.Join(aDir, "pki", pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	tcfg, _ := pki.ClientConfig(caA, "127.0.0.1")
	c, err := wsconn.Dial(t.Context(), "wss://"+addr+"/v1/node/session", p.nkey, p.node, tcfg, &wsconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	na := &wsPeer{t: t, c: c}
	na.node(dispatch.Hello{Versions: dispatch.NodeVersions, Node: p.node})
	if _, ok := na.nodeRead().(*dispatch.Welcome); !ok {
		t.Fatal("no welcome from the child hub")
	}
	if st := nextOf[dispatch.Settings](t, na); st.Epoch != 1 {
		t.Fatalf("child leader's epoch %d, want 1", st.Epoch)
	}
	na.node(haReport)
	na.node(dispatch.Held{})
	nb := p.nodeOn(b)
	nb.node(haReport)

	killedAt := time.Now()
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("hub-b leading %v after hub-a's SIGKILL", waitLeading(t, b, 10*time.Second).Round(time.Millisecond))
	if st := nextOf[dispatch.Settings](t, nb); st.Epoch != 2 {
		t.Fatalf("new leader's epoch %d, want 2", st.Epoch)
	}
	nb.node(haReport)
	nb.node(dispatch.Held{})
	p.relayOn(b)
	tk := reserve(t, p.at(b))
	off := nextOf[dispatch.Offer](t, nb)
	nb.node(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	p.at(b).want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)
	took := time.Since(killedAt)
	t.Logf("first grant by the new leader %v after hub-a's SIGKILL (ttl %d ms)", took.Round(time.Millisecond), ttlMillis)
	if limit := ttlMillis*time.Millisecond*4/3 + 3*time.Second; took > limit {
		t.Errorf("failover took %v, want at most %v", took, limit)
	}
}
