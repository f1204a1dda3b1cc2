package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
)

// ErrNoHub: nothing answers on the admin socket.
var ErrNoHub = errors.New("admin: is vk-hub running?")

// Client talks to a running hub over its admin socket; the CLI's only way
// to the hub (it never opens the database). Create it with [Dial].
type Client struct {
	path string
	http *http.Client
}

// Dial returns a Client for the socket at path. It connects lazily, per
// request.
func Dial(path string) *Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &Client{path: path, http: &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			}},
	}}
}

// do sends one request; in is JSON-encoded unless it is []byte (sent as
// is); out, when not nil, receives the answer: its bytes for a *[]byte,
// else decoded from JSON.
func (c *Client) do(ctx context.Context, method, path string, in any, wantStatus int, out any) error {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(v)
	case signedBody:
		body = v.r
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://vk-hub"+path, body)
	if err != nil {
		return err
	}
	if sb, ok := in.(signedBody); ok {
		req.Header.Set(HeaderReleaseSignature, sb.sig)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w looked for %s", ErrNoHub, c.path)
		}
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("admin: %s: permission denied; run as root or the hub's user", c.path)
		}
		return fmt.Errorf("admin: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("admin: read answer: %w", err)
	}
	if resp.StatusCode != wantStatus {
		var e client.Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		// The hub's text starts with the sentinel's own text already:
		// wrap once, not "admin: not found: admin: not found: …".
		switch resp.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, strings.TrimPrefix(e.Error, ErrNotFound.Error()+": "))
		case http.StatusBadRequest:
			return fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(e.Error, ErrInvalid.Error()+": "))
		}
		return fmt.Errorf("admin: hub answered: %s", e.Error)
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
	} else if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("admin: decode answer: %w", err)
		}
	}
	return nil
}

// get is do with the answer of type T.
func get[T any](ctx context.Context, c *Client, method, path string, in any, wantStatus int) (T, error) {
	var out T
	err := c.do(ctx, method, path, in, wantStatus, &out)
	return out, err
}

// CreateToken mints an enrolment token of kind living ttl (0: default).
func (c *Client) CreateToken(ctx context.Context, kind string, ttl time.Duration) (TokenAnswer, error) {
	return get[TokenAnswer](ctx, c, http.MethodPost, "/admin/tokens", TokenRequest{Kind: kind, TTLSecs: int64(ttl / time.Second)}, http.StatusCreated)
}

// Relays lists the enrolled relays.
func (c *Client) Relays(ctx context.Context) ([]Relay, error) {
	return get[[]Relay](ctx, c, http.MethodGet, "/admin/relays", nil, http.StatusOK)
}

// RemoveRelay removes a relay.
func (c *Client) RemoveRelay(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/admin/relays/"+url.PathEscape(id), nil, http.StatusNoContent, nil)
}

// RemoveNode removes a node that will not come back.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/admin/nodes/"+url.PathEscape(id), nil, http.StatusNoContent, nil)
}

// Nodes lists the nodes, sorted by ID.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	return get[[]Node](ctx, c, http.MethodGet, "/admin/nodes", nil, http.StatusOK)
}

// Queue lists what waits for room, in queue order, with the wait reasons.
func (c *Client) Queue(ctx context.Context) ([]Waiting, error) {
	return get[[]Waiting](ctx, c, http.MethodGet, "/admin/queue", nil, http.StatusOK)
}

// SetPools sets a node's pools.
func (c *Client) SetPools(ctx context.Context, id string, pools []string) error {
	return c.do(ctx, http.MethodPut, "/admin/nodes/"+url.PathEscape(id)+"/pools", PoolsRequest{Pools: pools}, http.StatusNoContent, nil)
}

// SetCeiling sets a node's ceiling (n >= 0 or NoCeiling).
func (c *Client) SetCeiling(ctx context.Context, id string, n int) error {
	return c.do(ctx, http.MethodPut, "/admin/nodes/"+url.PathEscape(id)+"/ceiling", CeilingRequest{Ceiling: n}, http.StatusNoContent, nil)
}

// Drain starts or ends draining a node.
func (c *Client) Drain(ctx context.Context, id string, on bool) error {
	return c.do(ctx, http.MethodPut, "/admin/nodes/"+url.PathEscape(id)+"/drain", DrainRequest{Drain: on}, http.StatusNoContent, nil)
}

// Policy returns the capacity policy in force as a policy file.
func (c *Client) Policy(ctx context.Context) ([]byte, error) {
	return get[[]byte](ctx, c, http.MethodGet, "/admin/policy", nil, http.StatusOK)
}

// SetPolicy replaces the capacity policy with a policy file's contents.
func (c *Client) SetPolicy(ctx context.Context, file []byte) error {
	return c.do(ctx, http.MethodPut, "/admin/policy", file, http.StatusNoContent, nil)
}

// Projects lists the approval records (projects and servers).
func (c *Client) Projects(ctx context.Context) ([]store.Approval, error) {
	return get[[]store.Approval](ctx, c, http.MethodGet, "/admin/projects", nil, http.StatusOK)
}

// SetApproval approves or rejects a project (project 0: the server).
func (c *Client) SetApproval(ctx context.Context, instance string, project int64, state store.ApprovalState) error {
	return c.do(ctx, http.MethodPost, "/admin/projects", ApprovalRequest{Instance: instance, Project: project, State: state}, http.StatusNoContent, nil)
}

func parseProject(s string) (int64, error) {
	if s == "server" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: project %q: want a GitLab project ID or \"server\"", ErrInvalid, s)
	}
	return n, nil
}
