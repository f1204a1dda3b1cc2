package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/proto/client"
)

// ErrDetect is returned when a resource cannot be detected from the host
// and the config does not state it.
var ErrDetect = errors.New("node: cannot detect host resources")

// parseMemTotal reads MemTotal (bytes) from /proc/meminfo's content.
func parseMemTotal(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n < 0 || n > 1<<52 {
				return 0, fmt.Errorf("%w: MemTotal %q", ErrDetect, f[1])
			}
			unit := int64(1)
			if len(f) >= 3 && strings.EqualFold(f[2], "kB") {
				unit = 1024
			}
			return n * unit, nil
		}
	}
	return 0, fmt.Errorf("%w: no MemTotal", ErrDetect)
}

// ParseLoadavg reads the 1-minute load average from /proc/loadavg's
// content ("0.52 0.58 0.59 1/467 12345").
func ParseLoadavg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: empty loadavg", ErrDetect)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 || v != v || v > 1e9 {
		return 0, fmt.Errorf("%w: loadavg %q", ErrDetect, f[0])
	}
	return v, nil
}

// load1 returns the host's 1-minute load average, nil when unreadable.
func load1() *float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	v, err := ParseLoadavg(b)
	if err != nil {
		return nil
	}
	return &v
}

// capacity resolves the resources the node offers: stated values as they
// are, zero ones detected from the host minus the reserve.
func (c Config) capacity() (ledger.Envelope, error) {
	r := c.Resources
	var env ledger.Envelope
	var errs []error
	env.MemBytes = r.Mem.Bytes()
	if env.MemBytes == 0 {
		b, err := os.ReadFile("/proc/meminfo")
		var total int64
		if err == nil {
			total, err = parseMemTotal(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: memory: %w (set [resources] mem)", ErrDetect, err))
		}
		env.MemBytes = total - r.ReserveMem.Bytes()
	}
	env.DiskBytes = r.Disk.Bytes()
	if env.DiskBytes == 0 {
		dir := c.buildsDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("%w: disk: %w", ErrDetect, err))
		} else {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				errs = append(errs, fmt.Errorf("%w: disk: statfs %s: %w (set [resources] disk)", ErrDetect, dir, err))
			} else {
				env.DiskBytes = int64(st.Blocks)*int64(st.Bsize) - r.ReserveDisk.Bytes()
			}
		}
	}
	env.CPUs = int64(r.CPUs)
	if env.CPUs == 0 {
		env.CPUs = int64(runtime.NumCPU() - r.ReserveCPUs)
	}
	if env.MemBytes <= 0 || env.DiskBytes <= 0 || env.CPUs <= 0 {
		errs = append(errs, fmt.Errorf("%w: nothing left for jobs after the reserve: mem %d, disk %d, cpus %d",
			ErrDetect, env.MemBytes, env.DiskBytes, env.CPUs))
	}
	return env, errors.Join(errs...)
}

// toLedger converts a wire envelope.
func toLedger(e client.Envelope) ledger.Envelope {
	return ledger.Envelope{MemBytes: e.Mem.Bytes(), DiskBytes: e.Disk.Bytes(), CPUs: int64(e.CPUs)}
}

// toWire converts a ledger envelope.
func toWire(e ledger.Envelope) client.Envelope {
	return client.Envelope{Mem: client.Size(e.MemBytes), Disk: client.Size(e.DiskBytes), CPUs: int(e.CPUs)}
}
