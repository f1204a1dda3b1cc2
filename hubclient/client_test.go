package hubclient

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
)

var (
	grant = client.ReservationGrant{Admission: "adm1", Reservation: "res1", Node: "n1",
		Envelope: client.Envelope{Mem: 16 * client.GiB, CPUs: 4, Disk: 20 * client.GiB}, LeaseSecs: 88}
	view     = client.JobView{ID: "job1", Revision: 3, State: client.JobRunning, Node: "n1", OutputLen: 12}
	placeSub = client.JobSubmission{Runner: "r", RequestID: client.NewRequestID(),
		Placement: client.Placement{Pool: "linux", Envelope: client.Envelope{Mem: client.GiB, CPUs: 1, Disk: client.GiB}}}
)

// call runs one client method and returns its typed answer (as any) and
// error; target is the request line the hub must see.
type call struct {
	route  string
	target string
	run    func(ctx context.Context, c *Client) (any, error)
}

var calls = map[string]call{
	"capacity": {client.RouteCapacity, "/v1/capacity", func(ctx context.Context, c *Client) (any, error) {
		return c.Capacity(ctx, client.CapacityRequest{Placement: placeSub.Placement, After: 4, WaitSecs: 2})
	}},
	"reserve": {client.RouteReserve, "/v1/reservations", func(ctx context.Context, c *Client) (any, error) {
		return c.Reserve(ctx, client.ReservationRequest{Runner: "r", Queue: true, RequestID: placeSub.RequestID, Placement: placeSub.Placement})
	}},
	"poll": {client.RouteTicketGet, "/v1/reservations/tickets/t%2F1?wait=60", func(ctx context.Context, c *Client) (any, error) {
		return c.PollTicket(ctx, "t/1", 90*time.Second)
	}},
	"cancel-ticket": {client.RouteTicketDelete, "/v1/reservations/tickets/t1", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.CancelTicket(ctx, "t1")
	}},
	"claim": {client.RouteClaim, "/v1/reservations/adm1/claim", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.Claim(ctx, "adm1")
	}},
	"outcome": {client.RouteOutcome, "/v1/reservations/adm1/outcome", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.Outcome(ctx, "adm1", client.OutcomeEmpty)
	}},
	"outcome-next": {client.RouteOutcome, "/v1/reservations/adm1/outcome", func(ctx context.Context, c *Client) (any, error) {
		return c.OutcomeNext(ctx, "adm1", client.OutcomeEmpty, client.ReservationRequest{Runner: "r", Queue: true, RequestID: placeSub.RequestID, Placement: placeSub.Placement})
	}},
	"renew": {client.RouteRenew, "/v1/reservations/res1/renew", func(ctx context.Context, c *Client) (any, error) {
		return c.Renew(ctx, "res1", 120)
	}},
	"release": {client.RouteReservationDelete, "/v1/reservations/res1", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.Release(ctx, "res1")
	}},
	"submit": {client.RouteSubmit, "/v1/jobs", func(ctx context.Context, c *Client) (any, error) {
		return c.SubmitJob(ctx, placeSub)
	}},
	"get-job": {client.RouteJobGet, "/v1/jobs/job1?after=3&wait=5", func(ctx context.Context, c *Client) (any, error) {
		return c.GetJob(ctx, "job1", 3, 4500*time.Millisecond)
	}},
	"output": {client.RouteOutput, "/v1/jobs/job1/output?offset=5&wait=1", func(ctx context.Context, c *Client) (any, error) {
		return c.ReadOutput(ctx, "job1", 5, time.Second)
	}},
	"cancel": {client.RouteCancel, "/v1/jobs/job1/cancel", func(ctx context.Context, c *Client) (any, error) {
		return c.Cancel(ctx, "job1", client.CancelImmediate)
	}},
	"settle": {client.RouteSettle, "/v1/jobs/job1/settle", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.Settle(ctx, "job1")
	}},
	"hello": {client.RouteClients, "/v1/clients", func(ctx context.Context, c *Client) (any, error) {
		return nil, c.Hello(ctx, client.ClientHello{Name: "dash"})
	}},
}

// Each endpoint's status → answer table, over real TLS with every request's
// signature verified by the server.
//
// spec: API-55, AUTH-14
func TestEndpointAnswers(t *testing.T) {
	gone := `{"error":"ticket ended","code":"reservation_gone"}`
	unavailable := `{"error":"busy","code":"unavailable","retry_after_secs":3,"extra":true}`
	tests := []struct {
		name       string
		call       string
		reply      reply
		want       any
		wantStatus int         // an error with this status, 0: no StatusError
		wantCode   client.Code // its code
		wantErr    error       // errors.Is target, nil: none beyond StatusError
	}{
		{"capacity 200", "capacity", reply{status: 200, body: `{"revision":5,"fits":2,"new_field":1}`}, client.Capacity{Revision: 5, Fits: 2}, 0, "", nil},
		{"capacity 503", "capacity", reply{status: 503, body: unavailable}, client.Capacity{}, 503, client.CodeUnavailable, nil},
		{"reserve 201 grant", "reserve", reply{status: 201, body: mustJSON(grant)}, Reserved{Grant: &grant}, 0, "", nil},
		{"reserve 202 ticket", "reserve", reply{status: 202, body: `{"ticket":"t9"}`}, Reserved{Ticket: "t9"}, 0, "", nil},
		{"reserve 202 without ticket", "reserve", reply{status: 202, body: `{}`}, Reserved{}, 0, "", ErrProtocol},
		{"reserve 503 no_capacity", "reserve", reply{status: 503, body: `{"error":"none","code":"no_capacity","retry_after_secs":10}`}, Reserved{}, 503, client.CodeNoCapacity, nil},
		{"reserve 410 is an error", "reserve", reply{status: 410, body: gone}, Reserved{}, 410, client.CodeReservationGone, nil},
		{"poll 201 grant", "poll", reply{status: 201, body: mustJSON(grant)}, Reserved{Grant: &grant}, 0, "", nil},
		{"poll 202 waiting", "poll", reply{status: 202, body: `{"ticket":"t/1"}`}, Reserved{Ticket: "t/1"}, 0, "", nil},
		{"poll 410 gone", "poll", reply{status: 410, body: gone}, Reserved{Gone: true}, 0, "", nil},
		{"poll 404 another's", "poll", reply{status: 404, body: `{"error":"no","code":"not_found"}`}, Reserved{}, 404, client.CodeNotFound, nil},
		{"poll 200 unexpected", "poll", reply{status: 200, body: `{}`}, Reserved{}, 0, "", ErrProtocol},
		{"cancel ticket 204", "cancel-ticket", reply{status: 204}, nil, 0, "", nil},
		{"cancel ticket 409", "cancel-ticket", reply{status: 409, body: `{"error":"claimed","code":"conflict"}`}, nil, 409, client.CodeConflict, nil},
		{"claim 204", "claim", reply{status: 204}, nil, 0, "", nil},
		{"claim 410", "claim", reply{status: 410, body: gone}, nil, 410, client.CodeReservationGone, nil},
		{"outcome 204", "outcome", reply{status: 204}, nil, 0, "", nil},
		{"outcome 409", "outcome", reply{status: 409, body: `{"error":"state","code":"conflict"}`}, nil, 409, client.CodeConflict, nil},
		{"outcome next 201 grant", "outcome-next", reply{status: 201, body: mustJSON(grant)}, Reserved{Grant: &grant}, 0, "", nil},
		{"outcome next 202 ticket", "outcome-next", reply{status: 202, body: `{"ticket":"t9"}`}, Reserved{Ticket: "t9"}, 0, "", nil},
		{"outcome next 204 taken alone", "outcome-next", reply{status: 204}, Reserved{}, 0, "", nil},
		{"outcome next 409", "outcome-next", reply{status: 409, body: `{"error":"state","code":"conflict"}`}, Reserved{}, 409, client.CodeConflict, nil},
		{"outcome next 400 old hub", "outcome-next", reply{status: 400, body: `{"error":"unknown field","code":"invalid"}`}, Reserved{}, 400, client.CodeInvalid, nil},
		{"outcome next 200 unexpected", "outcome-next", reply{status: 200, body: `{}`}, Reserved{}, 0, "", ErrProtocol},
		{"renew 200", "renew", reply{status: 200, body: mustJSON(grant)}, grant, 0, "", nil},
		{"renew 410", "renew", reply{status: 410, body: gone}, client.ReservationGrant{}, 410, client.CodeReservationGone, nil},
		{"renew 200 garbage", "renew", reply{status: 200, body: `{"lease_secs":"x"`}, client.ReservationGrant{}, 0, "", ErrProtocol},
		{"release 204", "release", reply{status: 204}, nil, 0, "", nil},
		{"submit 201", "submit", reply{status: 201, body: mustJSON(view)}, view, 0, "", nil},
		{"submit 200 is not 201", "submit", reply{status: 200, body: mustJSON(view)}, client.JobView{}, 0, "", ErrProtocol},
		{"submit 403 approval", "submit", reply{status: 403, body: `{"error":"wait","code":"approval_pending","approval_url":"https://hub/x"}`}, client.JobView{}, 403, client.CodeApprovalPending, nil},
		{"submit 410 not_found", "submit", reply{status: 410, body: `{"error":"gone","code":"not_found"}`}, client.JobView{}, 410, client.CodeNotFound, nil},
		{"submit 413", "submit", reply{status: 413, body: `{"error":"big","code":"too_large"}`}, client.JobView{}, 413, client.CodeTooLarge, nil},
		{"submit unknown code", "submit", reply{status: 403, body: `{"error":"?","code":"brand_new"}`}, client.JobView{}, 403, client.CodeOther, nil},
		{"get job 200", "get-job", reply{status: 200, body: mustJSON(view)}, view, 0, "", nil},
		{"get job 404", "get-job", reply{status: 404, body: `{"error":"no","code":"not_found"}`}, client.JobView{}, 404, client.CodeNotFound, nil},
		{"output 200", "output", reply{status: 200, body: "hello", header: map[string]string{
			"Content-Type": "application/octet-stream", client.HeaderOutputOffset: "5", client.HeaderOutputLength: "10", client.HeaderOutputComplete: "true"}},
			Output{Data: []byte("hello"), Offset: 5, Length: 10, Complete: true}, 0, "", nil},
		{"output 200 not complete", "output", reply{status: 200, body: "hi", header: map[string]string{
			"Content-Type": "application/octet-stream", client.HeaderOutputOffset: "5", client.HeaderOutputLength: "9", client.HeaderOutputComplete: "false"}},
			Output{Data: []byte("hi"), Offset: 5, Length: 9}, 0, "", nil},
		{"output 200 missing headers", "output", reply{status: 200, body: "hi", header: map[string]string{"Content-Type": "text/plain"}}, Output{}, 0, "", ErrProtocol},
		{"output 200 body past length", "output", reply{status: 200, body: "hello", header: map[string]string{
			"Content-Type": "text/plain", client.HeaderOutputOffset: "5", client.HeaderOutputLength: "6"}}, Output{}, 0, "", ErrProtocol},
		{"output 416", "output", reply{status: 416, body: `{"error":"past","code":"invalid"}`, header: map[string]string{client.HeaderOutputLength: "3"}},
			Output{Length: 3}, 416, client.CodeInvalid, ErrPastEnd},
		{"cancel 202", "cancel", reply{status: 202, body: mustJSON(view)}, view, 0, "", nil},
		{"cancel 404", "cancel", reply{status: 404, body: `{"error":"no","code":"not_found"}`}, client.JobView{}, 404, client.CodeNotFound, nil},
		{"settle 204", "settle", reply{status: 204}, nil, 0, "", nil},
		{"settle 409", "settle", reply{status: 409, body: `{"error":"running","code":"conflict"}`}, nil, 409, client.CodeConflict, nil},
		{"hello 204", "hello", reply{status: 204}, nil, 0, "", nil},
		{"hello 403 relay", "hello", reply{status: 403, body: `{"error":"relays may not","code":"forbidden"}`}, nil, 403, client.CodeForbidden, nil},
		{"500 without a body", "hello", reply{status: 500}, nil, 500, client.CodeOther, nil},
		{"502 html from a proxy", "claim", reply{status: 502, body: "<html>bad gateway</html>", header: map[string]string{"Content-Type": "text/html"}}, nil, 502, client.CodeOther, nil},
	}
	h := newFakeHub(t)
	c := h.client(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := calls[tt.call]
			h.answer(cl.route, tt.reply)
			n := len(h.requests())
			got, err := cl.run(t.Context(), c)
			if tt.wantStatus == 0 && tt.wantErr == nil && err != nil {
				t.Fatalf("%s: unexpected error %v", tt.call, err)
			}
			if st, code := statusOf(err); st != tt.wantStatus || code != tt.wantCode {
				t.Errorf("%s: error %v has status %d code %q, want %d %q", tt.call, err, st, code, tt.wantStatus, tt.wantCode)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: error %v, want one wrapping %v", tt.call, err, tt.wantErr)
			}
			if tt.want != nil {
				if d := cmp.Diff(tt.want, got); d != "" {
					t.Errorf("%s answer (-want +got):\n%s", tt.call, d)
				}
			}
			reqs := h.requests()
			if len(reqs) != n+1 {
				t.Fatalf("hub saw %d requests, want 1", len(reqs)-n)
			}
			if r := reqs[n]; r.target != cl.target || r.principal != principal {
				t.Errorf("hub saw %s %s as %q, want %s as %q", r.method, r.target, r.principal, cl.target, principal)
			}
		})
	}
}

// The request bodies are the proto types, as the hub decodes them.
func TestRequestBodies(t *testing.T) {
	h := newFakeHub(t)
	c := h.client(t, nil)
	h.answer(client.RouteOutcome, reply{status: 204})
	h.answer(client.RouteCancel, reply{status: 202, body: mustJSON(view)})
	h.answer(client.RouteRenew, reply{status: 200, body: mustJSON(grant)})
	h.answer(client.RouteOutcome, reply{status: 202, body: `{"ticket":"t9"}`})
	if err := c.Outcome(t.Context(), "adm1", client.OutcomeJob); err != nil {
		t.Fatal(err)
	}
	next := client.ReservationRequest{Runner: "r", Queue: true, RequestID: "00112233445566778899aabbccddeeff", Placement: client.Placement{Pool: "p", Envelope: client.Envelope{CPUs: 1}}}
	if _, err := c.OutcomeNext(t.Context(), "adm2", client.OutcomeEmpty, next); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(t.Context(), "j", client.CancelGraceful); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(t.Context(), "r", 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range h.requests() {
		got = append(got, r.method+" "+r.target+" "+strings.TrimSpace(string(r.body)))
	}
	want := []string{
		`POST /v1/reservations/adm1/outcome {"admission":"adm1","outcome":"job"}`,
		`POST /v1/reservations/adm2/outcome {"admission":"adm2","outcome":"empty","next":{"runner":"r","queue":true,"request_id":"00112233445566778899aabbccddeeff","placement":{"pool":"p","envelope":{"mem":"0","cpus":1,"disk":"0"}}}}`,
		`POST /v1/jobs/j/cancel {"mode":"graceful"}`,
		`POST /v1/reservations/r/renew {}`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bodies (-want +got):\n%s", d)
	}
}

// Requests one after another share one kept-alive connection, each with
// its own signature (over that connection's exporter and its sequence
// number, AUTH-14); with MaxIdleConns negative every request takes a new
// connection, which resumes the client's TLS session.
//
// spec: AUTH-14
func TestConnectionReuse(t *testing.T) {
	const n = 5
	for _, tc := range []struct {
		name              string
		maxIdle           int
		conns, resumedReq int
	}{
		{"kept alive", 0, 1, 0},
		{"new per request", -1, n, n - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHub(t)
			c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal, Log: testlog.New(t),
				MaxIdleConns: tc.maxIdle})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.CloseIdleConnections)
			for range n {
				h.answer(client.RouteClaim, reply{status: 204})
			}
			before := h.connCount()
			for range n {
				if err := c.Claim(t.Context(), "adm1"); err != nil {
					t.Fatal(err)
				}
			}
			if got := h.connCount() - before; got != tc.conns {
				t.Errorf("%d requests used %d new connections, want %d", n, got, tc.conns)
			}
			sigs := map[string]bool{}
			for _, r := range h.requests() {
				sigs[r.sig] = true
			}
			if len(sigs) != n {
				t.Errorf("%d requests carried %d distinct signatures, want %d", n, len(sigs), n)
			}
			h.mu.Lock()
			resumed := h.resumed
			h.mu.Unlock()
			if resumed != tc.resumedReq {
				t.Errorf("%d of %d requests on resumed TLS sessions, want %d", resumed, n, tc.resumedReq)
			}
		})
	}
}

// A kept connection the hub closes is dropped, and the next request,
// retried or not, goes over a new connection with a new signature.
//
// spec: AUTH-14
func TestConnectionClosedByHub(t *testing.T) {
	h := newFakeHub(t)
	c := h.client(t, &instantClock{})
	t.Cleanup(c.CloseIdleConnections)
	h.answer(client.RouteClaim, reply{status: 204}, reply{status: 204})
	if err := c.Claim(t.Context(), "adm1"); err != nil {
		t.Fatal(err)
	}
	h.srv.CloseClientConnections()
	before := h.connCount()
	err := c.Retrier().Do(t.Context(), "claim", func(ctx context.Context) error { return c.Claim(ctx, "adm1") })
	if err != nil {
		t.Fatal(err)
	}
	if got := h.connCount() - before; got != 1 {
		t.Errorf("after the hub closed the connection: %d new connections, want 1", got)
	}
}

// A hub whose certificate does not chain to the pinned CA is refused
// before anything is sent.
//
// spec: AUTH-14
func TestPinnedCA(t *testing.T) {
	h := newFakeHub(t)
	other := newFakeHub(t)
	c, err := New(Config{HubURL: h.srv.URL, CAPEM: other.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Claim(t.Context(), "adm1")
	if err == nil || !Retryable(err) {
		t.Errorf("Claim to a hub with another CA = %v, want a (transport) error", err)
	}
	if n := len(h.requests()); n != 0 {
		t.Errorf("hub saw %d requests, want 0", n)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	h := newFakeHub(t)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"http", Config{HubURL: "http://127.0.0.1:1", CAPEM: h.caPEM, Key: h.key, Principal: "p"}},
		{"no host", Config{HubURL: "https://", CAPEM: h.caPEM, Key: h.key, Principal: "p"}},
		{"query", Config{HubURL: "https://h/?x=1", CAPEM: h.caPEM, Key: h.key, Principal: "p"}},
		{"no CA", Config{HubURL: h.srv.URL, CAPEM: []byte("junk"), Key: h.key, Principal: "p"}},
		{"no key", Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Principal: "p"}},
		{"no principal", Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", tt.name, err)
		}
	}
}

// A base path in the hub URL prefixes every route.
func TestBasePath(t *testing.T) {
	h := newFakeHub(t)
	c, err := New(Config{HubURL: h.srv.URL + "/", CAPEM: h.caPEM, Key: h.key, Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	h.answer(client.RouteSettle, reply{status: 204})
	if err := c.Settle(t.Context(), "a b"); err != nil {
		t.Fatal(err)
	}
	if got := h.requests()[0].target; got != "/v1/jobs/a%20b/settle" {
		t.Errorf("target %q", got)
	}
}

func TestReadOutputLarge(t *testing.T) {
	h := newFakeHub(t)
	c := h.client(t, nil)
	data := bytes.Repeat([]byte("x"), client.MaxOutputRead)
	h.answer(client.RouteOutput, reply{status: http.StatusOK, body: string(data), header: map[string]string{
		"Content-Type": "application/octet-stream", client.HeaderOutputOffset: "0", client.HeaderOutputLength: "1048576"}})
	out, err := c.ReadOutput(t.Context(), "j", 0, 0)
	if err != nil || !bytes.Equal(out.Data, data) {
		t.Fatalf("ReadOutput of 1 MiB = %d bytes, %v", len(out.Data), err)
	}
}

// A hub that does not answer within the request's own bound gives a
// retryable ErrTimeout, not the caller's cancellation.
//
// spec: RELAY-13
func TestRequestTimeout(t *testing.T) {
	h := newFakeHub(t)
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc(client.RouteClaim, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	h.srv.Config.Handler = mux
	c, err := New(Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: principal, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Claim(t.Context(), "adm1")
	if !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || !Retryable(err) {
		t.Errorf("Claim to a silent hub = %v, want a retryable ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Claim(ctx, "adm1"); errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) || Retryable(err) {
		t.Errorf("Claim with a cancelled context = %v, want context.Canceled", err)
	}
}
