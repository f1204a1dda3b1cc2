package ui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// errNotFound: no such page or object. Answered 404.
var errNotFound = errors.New("ui: not found")

// pageTemplate is one page: the layout with the page's content.
type pageTemplate = template.Template

// pageNames are the templates/<name>.html pages, each rendered inside
// templates/layout.html.
var pageNames = []string{"fleet", "node", "queue", "jobs", "job", "servers", "project", "relays", "policy", "dryrun", "audit", "error"}

// parseTemplates parses every page with the layout and the helpers.
func parseTemplates(s *server) (map[string]*pageTemplate, error) {
	funcs := template.FuncMap{
		"url":     s.url,
		"join":    func(ss []string) string { return strings.Join(ss, ", ") },
		"csv":     func(ss []string) string { return strings.Join(ss, ",") },
		"ceiling": admin.CeilingText,
		"size":    func(sz client.Size) string { return sz.String() },
		"stamp":   stamp,
		"dur":     dur,
		"project": projectText,
		"state":   stateClass,
		"args":    func(xs ...any) []any { return xs },
	}
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// pageData is what every page template gets: the layout's fields and the
// page's own Data.
type pageData struct {
	// Title is the page's title; Nav names the active tab.
	Title, Nav string
	// Base is the UI's base path.
	Base string
	// Operator is who is signed in.
	Operator string
	// Now is the clock's time at rendering.
	Now time.Time
	// Flash is the outcome of the POST that redirected here; empty if none.
	Flash string
	// Data is the page's own data.
	Data any

	s       *server
	session string
}

// Token returns the CSRF token of the form (kind, subject…) for this
// page's operator and session.
func (p *pageData) Token(form ...string) string {
	return p.s.csrfToken(p.Operator, p.session, form...)
}

// Ago is how long before the page's time t was ("3m12s ago"), or "—"
// for the zero time.
func (p *pageData) Ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := p.Now.Sub(t)
	if d < 0 {
		return "in " + dur(-d)
	}
	return dur(d) + " ago"
}

// flashes are the outcomes a redirect may name (?done=…); anything else
// is ignored, so a link cannot put words on the page.
var flashes = map[string]string{
	"pools":    "Pools set.",
	"ceiling":  "Ceiling set.",
	"drain":    "Node draining: it takes no new work.",
	"undrain":  "Drain ended: the node takes new work again.",
	"approved": "Approved.",
	"rejected": "Rejected.",
	"update":   "Update sent: the relay installs it and restarts; its new release shows here once it is back.",
}

// render executes page name with data into a buffer, then writes it: a
// template error becomes a 500, never half a page.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) error {
	p := &pageData{Title: title, Nav: nav, Base: s.base, Operator: operatorOf(r.Context()), Now: s.clk.Now().UTC(),
		Flash: flashes[r.URL.Query().Get("done")], Data: data, s: s, session: s.session(w, r)}
	var buf bytes.Buffer
	if err := s.pages[name].Execute(&buf, p); err != nil {
		return fmt.Errorf("ui: render %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
	return nil
}

// wrap runs a GET handler and maps its error to an error page once.
func (s *server) wrap(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, route, err)
		}
	})
}

// wrapPost bounds the form body, then runs h like wrap.
func (s *server) wrapPost(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return s.wrap(route, func(w http.ResponseWriter, r *http.Request) error {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadForm, err)
		}
		return h(w, r)
	})
}

// fail answers err as an error page: 404, 403 and 400 with the error's
// text, anything else 500 with a generic text (the error goes to the log).
func (s *server) fail(w http.ResponseWriter, r *http.Request, route string, err error) {
	status, msg := http.StatusInternalServerError, "Internal error: the hub's log has the details."
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, admin.ErrNotFound), errors.Is(err, store.ErrNotFound):
		status, msg = http.StatusNotFound, "Not found: "+err.Error()
	case errors.Is(err, ErrForbidden):
		status, msg = http.StatusForbidden, "Refused: the form is stale or was not sent from this UI. Reload the page and try again."
	case errors.Is(err, ErrBadForm), errors.Is(err, admin.ErrInvalid):
		status, msg = http.StatusBadRequest, "Not done: "+err.Error()
	}
	if status == http.StatusInternalServerError {
		s.log.ErrorContext(r.Context(), "ui request failed", logkey.Route, route, logkey.Status, status, logkey.Err, err)
	} else {
		s.log.InfoContext(r.Context(), "ui request refused", logkey.Route, route, logkey.Status, status, logkey.Err, err)
	}
	if rerr := s.render(w, r, status, "error", http.StatusText(status), "", msg); rerr != nil {
		http.Error(w, msg, status)
	}
}

// redirect answers a successful POST with 303 to path (under the base)
// naming the outcome done (POST/redirect/GET).
func (s *server) redirect(w http.ResponseWriter, r *http.Request, path, done string) error {
	http.Redirect(w, r, path+"?done="+url.QueryEscape(done), http.StatusSeeOther)
	return nil
}

// url joins the base path and the parts, each path-escaped:
// url "nodes" id "pools" → <base>/nodes/<id>/pools.
func (s *server) url(parts ...any) string {
	var b strings.Builder
	b.WriteString(s.base)
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(fmt.Sprint(p)))
	}
	if len(parts) == 0 {
		b.WriteByte('/')
	}
	return b.String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// dur formats d to the second, or to the millisecond below one second.
func dur(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func projectText(p int64) string {
	if p == 0 {
		return "—"
	}
	return strconv.FormatInt(p, 10)
}

// stateClass maps a state word to one of a fixed set of CSS classes.
func stateClass(st any) string {
	switch strings.ToLower(fmt.Sprint(st)) {
	case "ready", "approved", "running", "finished":
		return "ok"
	case "draining", "drained", "pending", "queued", "starting":
		return "warn"
	case "quarantined", "unreachable", "disconnected", "rejected", "failed":
		return "bad"
	}
	return "other"
}
