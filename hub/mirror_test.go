package hub

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// keptMaps are the only map fields the hub package's types may have, each
// with why it is not a second copy of what the scheduling core holds.
// The core owns tickets, reservations, admissions, jobs and every limit;
// a map that mirrors any of them (a count, a state, an admission record)
// belongs in the core as a query instead.
var keptMaps = map[string]string{
	"Driver.relays":             "relay sessions: the sender, the last report as the relay sent it",
	"Driver.nodes":              "node sessions: the sender, the last report, when it went down",
	"Driver.down":               "nodes past whose job_lost_after the driver declares them lost",
	"Driver.tickets":            "who asked for each ticket and the channel its long polls wait on",
	"Driver.jobs":               "job records as stored, and each job's spec until a node accepts it",
	"Driver.jobIDs":             "wire job ID to the core's job ID",
	"Driver.renewers":           "renew requests waiting for the node's lease answer",
	"Driver.nodeSets":           "operator settings by node, as persisted",
	"Driver.removed":            "nodes an operator removed while this driver ran",
	"relayRec.runners":          "the relay's runners as it reported them, by name",
	"relayRec.states":           "the relay's runner states as its heartbeat said them",
	"idMap.ids":                 "the ID table: hub names to the core's IDs",
	"idMap.keys":                "the ID table: the core's IDs back to hub names",
	"metrics.counters":          "metric families",
	"metrics.gauges":            "metric families",
	"metrics.hists":             "metric families",
	"recWriter.pending":         "record writes queued, by key",
	"nodeRouter.nodes":          "node sessions as a standby holds them, with their last report and heartbeat, before any driver exists",
	"relayReleasesReq.releases": "a request's answer: each relay's release as its report said it",
	"limbo.jobs":                "job records a takeover restored undecided: the core does not know them until a held adopts one",
	"limbo.awaiting":            "node sessions up at a takeover whose held has not come yet",
	"Driver.settling":           "job records settled (the core settled them) whose settled write is not durable yet",
}

// keptFields are the fields of the records the driver keeps per ticket
// and per job: none may hold a state or a count the core holds (a
// ticket's grant or claim, an admission's reservation or node).
var keptFields = map[string][]string{
	"ticketRec": {"id", "owner", "runner", "wake", "queued"},
	"jobRec":    {"sid", "rec", "spec", "name", "stored", "saved", "outLen", "result", "wake"},
}

// driverCounters are the Driver's integer fields: IDs it mints and
// revisions it moves. A count of tickets or reservations is the core's.
var driverCounters = []string{"nextTk", "nextJob", "sessions", "idFloor", "capRev"}

// TestNoMirroredSchedState keeps the driver thin: it fails when a type of
// package hub grows a map, a per-ticket or per-job field, or a Driver
// counter not listed above, so shadow books of the core (the limit
// counters and admission maps that once were here) do not come back
// unnoticed.
func TestNoMirroredSchedState(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			typ := ts.Name.Name
			for _, fl := range st.Fields.List {
				for _, id := range fl.Names {
					field := typ + "." + id.Name
					seen[field] = true
					if _, isMap := fl.Type.(*ast.MapType); isMap && keptMaps[field] == "" {
						t.Errorf("%s: map field %s %s is not in keptMaps: if it mirrors the core's state, ask the core instead",
							fset.Position(id.Pos()), field, types.ExprString(fl.Type))
					}
					if want, ok := keptFields[typ]; ok && !slices.Contains(want, id.Name) {
						t.Errorf("%s: %s is not in keptFields: the core holds a ticket's and a job's state",
							fset.Position(id.Pos()), field)
					}
					if typ == "Driver" && isInteger(fl.Type) && !slices.Contains(driverCounters, id.Name) {
						t.Errorf("%s: Driver counter %s is not in driverCounters: counts of tickets and reservations are the core's",
							fset.Position(id.Pos()), id.Name)
					}
				}
			}
			return true
		})
	}
	for field := range keptMaps {
		if !seen[field] {
			t.Errorf("keptMaps lists %s, which no longer exists: drop it", field)
		}
	}
}

func isInteger(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	if !ok {
		return false
	}
	switch id.Name {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return true
	}
	return false
}
