package oci

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A service's port counts as up when its network namespace has a socket
// listening on it, on any address, IPv4 or IPv6 (/proc/<pid>/net/tcp{,6}).
func TestListening(t *testing.T) {
	const head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for _, tc := range []struct {
		name  string
		table string
		port  int
		want  bool
	}{
		{"listening on 127.0.0.1:8080", head + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", 8080, true},
		{"listening on 0.0.0.0:5432", head + "   0: 00000000:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", 5432, true},
		{"another port", head + "   0: 00000000:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", 8080, false},
		{"established, not listening", head + "   0: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", 8080, false},
		{"tcp6 any address", head + "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", 8080, true},
		{"header only", head, 8080, false},
		{"garbage", "not a table\nat all\n", 8080, false},
	} {
		if got := listening([]byte(tc.table), tc.port); got != tc.want {
			t.Errorf("%s: listening(%d) = %v, want %v", tc.name, tc.port, got, tc.want)
		}
	}
}

// probeInNetns reads this process's own namespace right: a listener it
// opens is seen, a closed one is not.
func TestProbeOwnNamespace(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if !probeInNetns(os.Getpid(), port) {
		t.Errorf("port %d listening here, probe says no", port)
	}
	ln.Close()
	if probeInNetns(os.Getpid(), port) {
		t.Errorf("port %d closed, probe says listening", port)
	}
}

// No code of the node's executors moves a thread into another namespace
// or locks one for good: when the runtime ends such a thread, every
// process that thread forked with Pdeathsig (the process backend's job
// shells, runc exec) is SIGKILLed. Service probes read /proc instead.
func TestNoThreadNamespaceSwitch(t *testing.T) {
	dirs := []string{".", "../process", "..", "../.."}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "runtime" && sel.Sel.Name == "LockOSThread" || x.Name == "unix" && sel.Sel.Name == "Setns") {
					t.Errorf("%s: %s.%s: a thread switched or locked for good can take Pdeathsig children with it", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
