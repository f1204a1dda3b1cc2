package regproxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// follower is the proxy's transport: it follows a GET's or HEAD's
// redirects that leave the registry's origin (blob storage), without any
// credential, and hands every other response back unchanged (same-origin
// redirects are rewritten for the guest by modifyResponse).
type follower struct {
	next   http.RoundTripper
	origin string // the registry's origin, lower-case scheme://host
}

// safeHeaders are the guest's headers a cross-origin hop keeps: content
// negotiation and ranges, never credentials.
var safeHeaders = []string{"Accept", "Accept-Encoding", "Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "User-Agent"}

func (f *follower) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	if err != nil || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		return resp, err
	}
	cur := req
	for hops := 0; ; hops++ {
		loc := redirectTarget(resp, cur.URL)
		if loc == nil || origin(loc) == f.origin {
			return resp, nil
		}
		if hops >= MaxRedirects {
			discard(resp)
			return nil, fmt.Errorf("%w: more than %d cross-origin hops", ErrTooManyRedirects, MaxRedirects)
		}
		if cur.URL.Scheme == "https" && loc.Scheme == "http" {
			discard(resp)
			return nil, fmt.Errorf("%w: to %s", ErrRedirectDowngrade, loc.Host)
		}
		discard(resp)
		next, err := http.NewRequestWithContext(req.Context(), req.Method, loc.String(), nil)
		if err != nil {
			return nil, err
		}
		for _, k := range safeHeaders {
			if v := req.Header.Values(k); len(v) > 0 {
				next.Header[k] = v
			}
		}
		if _, ok := next.Header["User-Agent"]; !ok {
			next.Header.Set("User-Agent", "")
		}
		cur = next
		if resp, err = f.next.RoundTrip(next); err != nil {
			return nil, err
		}
	}
}

// redirectTarget returns the absolute http(s) URL a 301/302/303/307/308
// points to, or nil for any other response or an unusable Location.
func redirectTarget(resp *http.Response, base *url.URL) *url.URL {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	u, err := base.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil
	}
	u.Fragment = ""
	return u
}

// discard drains a little of a response body (so the connection may be
// reused) and closes it.
func discard(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
