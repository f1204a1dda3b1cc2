package testfleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/node/journal"
)

// freeAddr returns host:port for a port free now on addr's host (given
// as host:0): a child hub binds it, and binds it again when restarted,
// as a restarted vk-hub would.
func freeAddr(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("testfleet: picking a hub port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fencedRe finds the count a hub logs when it closes its store
// (hub/lease.go): the writes its fenced store refused.
var fencedRe = regexp.MustCompile(`fenced_writes_refused=(\d+)`)

// readLog copies a child hub's log lines into the fleet's log and adds
// up the fenced writes it says it refused.
func (h *Hub) readLog(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := fencedRe.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			h.fenced.Add(n)
		}
		log.Info(line)
	}
}

// FencedRefused returns how many writes this instance's child processes
// said, on their way down, their fenced store refused because a newer
// leader held the lease (Options.HubBinary; a SIGKILLed process says
// nothing, and wrote nothing after its death either).
func (h *Hub) FencedRefused() int64 { return h.fenced.Load() }

// running reports whether the hub's child process runs; a process that
// exited by itself (a deposed leader stops) is reaped here.
func (h *Hub) running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return false
	}
	select {
	case <-h.exited:
		h.proc, h.up = nil, false
		return false
	default:
		return true
	}
}

// Exited is closed once the hub's current child process has exited (nil
// when none runs).
func (h *Hub) Exited() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return nil
	}
	return h.exited
}

// Signal sends sig to the hub's child process: SIGSTOP and SIGCONT pause
// and resume it (a machine frozen, then thawed, with its connections
// still open).
func (h *Hub) Signal(sig syscall.Signal) error {
	p := h.Process()
	if p == nil {
		return errors.New("testfleet: hub process is not running")
	}
	return p.Signal(sig)
}

// Health asks the instance's GET /healthz: whether it leads or stands by,
// and at which epoch.
func (h *Hub) Health(ctx context.Context) (hub.Health, error) {
	var hl hub.Health
	tc, err := pki.ClientConfig(h.CAPEM(), "127.0.0.1")
	if err != nil {
		return hl, err
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}, Timeout: 3 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+h.Addr()+"/healthz", nil)
	if err != nil {
		return hl, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return hl, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return hl, fmt.Errorf("testfleet: /healthz: %s", resp.Status)
	}
	return hl, json.NewDecoder(resp.Body).Decode(&hl)
}

// WaitLeading waits until the instance says it leads, returning its
// epoch.
func (h *Hub) WaitLeading(ctx context.Context) (uint64, error) {
	if srv := h.Server(); srv != nil {
		select {
		case <-srv.Leading():
			return srv.Epoch(), nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if hl, err := h.Health(ctx); err == nil && hl.Role == "leader" {
			return hl.Epoch, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("testfleet: %s never led: %w", h.cfg.Store.Instance, ctx.Err())
		case <-t.C:
		}
	}
}

// waitServing waits until a child hub answers /healthz (as the leader
// when lead), failing when it exits first.
func (h *Hub) waitServing(ctx context.Context, exited <-chan struct{}, lead bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if hl, err := h.Health(ctx); err == nil && (!lead || hl.Role == "leader") {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("testfleet: hub process %s exited before it served (its log is the fleet's)", h.cfg.Store.Instance)
		case <-ctx.Done():
			return fmt.Errorf("testfleet: hub process %s never served: %w", h.cfg.Store.Instance, ctx.Err())
		case <-t.C:
		}
	}
}

// archiveSQL keeps a copy of every output chunk a hub commits: a table
// of the harness's own and a trigger on the hubs' chunk table, so that a
// settled job's output (which the hub drops, API-41) can still be
// compared with GitLab's trace. A write the fence refused rolls back
// with its copy.
const archiveSQL = `
CREATE TABLE IF NOT EXISTS vk_testfleet_archive (
	job  text NOT NULL,
	off  bigint NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (job, off)
);
CREATE OR REPLACE FUNCTION vk_testfleet_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO vk_testfleet_archive (job, off, data) VALUES (NEW.job, NEW.off, NEW.data) ON CONFLICT DO NOTHING;
	RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS vk_testfleet_keep ON vk_output_chunks;
CREATE TRIGGER vk_testfleet_keep AFTER INSERT ON vk_output_chunks FOR EACH ROW EXECUTE FUNCTION vk_testfleet_keep();
`

// openDB opens the fleet's own reader of the hubs' database (through
// the Standby's DSN, which the test keeps free of faults it injects
// between the first hub and the database) and adds the output archive.
func (f *Fleet) openDB(ctx context.Context) error {
	if f.standby == nil || f.standby.cfg.Store.Kind != hub.StorePostgres {
		return errors.New("testfleet: Options.HubBinary needs a PostgreSQL store and a Standby")
	}
	db, err := pgstore.Open(ctx, f.standby.cfg.Store.DSN, pgstore.Options{})
	if err != nil {
		return fmt.Errorf("testfleet: opening the hubs' database: %w", err)
	}
	if _, err := db.Pool().Exec(ctx, archiveSQL); err != nil {
		db.Close()
		return fmt.Errorf("testfleet: output archive: %w", err)
	}
	f.db = db
	return nil
}

// archived returns every byte of job's output the hubs committed, from
// the archive; ok is false when none was.
func (f *Fleet) archived(ctx context.Context, job string) ([]byte, bool, error) {
	rows, err := f.db.Pool().Query(ctx, "SELECT off, data FROM vk_testfleet_archive WHERE job = $1 ORDER BY off", job)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var all []byte
	n := 0
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return nil, false, err
		}
		if off != int64(len(all)) {
			return nil, false, fmt.Errorf("testfleet: archived output of %s has a chunk at %d after %d bytes", job, off, len(all))
		}
		all = append(all, data...)
		n++
	}
	return all, n > 0, rows.Err()
}

// JournalRuns reads the node's journal (node/journal, without disturbing
// the running node) and returns the hub job IDs it records as run: the
// jobs that reached a stage on this node. accepted counts every job the
// journal records, run or not.
func (n *Node) JournalRuns() (ran []string, accepted int, err error) {
	es, err := journal.Read(filepath.Join(n.cfg.Node.StateDir, "journal"))
	if err != nil {
		return nil, 0, err
	}
	for _, e := range es {
		if e.Stage != "" {
			ran = append(ran, e.Job)
		}
	}
	return ran, len(es), nil
}
