package main

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// The job views a person running the fake looks at, under /-/ on the
// fake's own address: every job's state, a job's trace, and a button that
// starts another run of a pipeline.
//
//	GET  /-/jobs                the jobs, newest first (HTML)
//	GET  /-/jobs/{id}           one job: state and trace (HTML)
//	GET  /-/jobs/{id}/trace     its trace as stored (text/plain)
//	POST /-/pipelines/{id}/run  another pipeline like pipeline {id}

// views serves the job pages of srv, which it is mounted on.
type views struct {
	srv *gitlabfake.Server
}

func (v *views) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /-/jobs", v.list)
	mux.HandleFunc("GET /-/jobs/{id}", v.job)
	mux.HandleFunc("GET /-/jobs/{id}/trace", v.trace)
	mux.HandleFunc("POST /-/pipelines/{id}/run", v.rerun)
	return mux
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}} · vk-gitlabfake</title>
{{if .Refresh}}<meta http-equiv="refresh" content="2">{{end}}
<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}
pre{background:#111;color:#eee;padding:1em;overflow-x:auto;white-space:pre-wrap}.success{color:#080}.failed{color:#c00}.running{color:#06c}</style>
</head><body>
<p><a href="/-/jobs">Jobs</a></p>
<h1>{{.Title}}</h1>
{{if .Jobs}}<table><thead><tr><th>Job</th><th>Pipeline</th><th>Project</th><th>Stage</th><th>Name</th><th>State</th><th>Failure</th><th>Trace</th><th></th></tr></thead><tbody>
{{range .Jobs}}<tr><td><a href="/-/jobs/{{.ID}}">{{.ID}}</a></td><td>{{.PipelineID}}</td><td>{{.Project}}</td><td>{{.Stage}}</td><td>{{.Name}}</td>
<td class="{{.State}}">{{.State}}</td><td>{{.FailureReason}}{{if .ExitCode}} (exit {{.ExitCode}}){{end}}</td><td>{{.TraceBytes}} bytes</td>
<td><form method="post" action="/-/pipelines/{{.PipelineID}}/run"><button>Run pipeline {{.PipelineID}} again</button></form></td></tr>
{{end}}</tbody></table>
{{else if .Job}}{{with .Job}}<p>Pipeline {{.PipelineID}} · stage {{.Stage}} · <span class="{{.State}}">{{.State}}</span>{{if .FailureReason}} · {{.FailureReason}} (exit {{.ExitCode}}){{end}} · <a href="/-/jobs/{{.ID}}/trace">raw trace</a></p>
<form method="post" action="/-/pipelines/{{.PipelineID}}/run"><button>Run pipeline {{.PipelineID}} again</button></form>{{end}}
<pre>{{.Trace}}</pre>
{{else}}<p>No jobs yet.</p>{{end}}
</body></html>
`))

type page struct {
	Title   string
	Refresh bool
	Jobs    []gitlabfake.JobSummary
	Job     *gitlabfake.JobInfo
	Trace   string
}

func (v *views) render(w http.ResponseWriter, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTmpl.Execute(w, p); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (v *views) list(w http.ResponseWriter, r *http.Request) {
	jobs := v.srv.JobList()
	refresh := false
	for _, j := range jobs {
		refresh = refresh || !j.State.Finished()
	}
	v.render(w, page{Title: "Jobs", Refresh: refresh, Jobs: jobs})
}

// lookup reads {id} and the job; false when it answered an error.
func (v *views) lookup(w http.ResponseWriter, r *http.Request) (gitlabfake.JobInfo, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "job id must be a number", http.StatusBadRequest)
		return gitlabfake.JobInfo{}, false
	}
	ji, err := v.srv.Job(id)
	if errors.Is(err, gitlabfake.ErrNotFound) {
		http.Error(w, fmt.Sprintf("no job %d", id), http.StatusNotFound)
		return ji, false
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return ji, false
	}
	return ji, true
}

func (v *views) job(w http.ResponseWriter, r *http.Request) {
	ji, ok := v.lookup(w, r)
	if !ok {
		return
	}
	v.render(w, page{Title: fmt.Sprintf("Job %d: %s", ji.ID, ji.Name), Refresh: !ji.State.Finished(), Job: &ji, Trace: readable(ji.Trace)})
}

func (v *views) trace(w http.ResponseWriter, r *http.Request) {
	ji, ok := v.lookup(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(ji.Trace)
}

// rerun starts another pipeline like {id} and shows the job list. A form
// posted from another site is refused (the fake listens on loopback, but
// a browser visits other sites too).
func (v *views) rerun(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && o != v.srv.URL() {
		http.Error(w, "cross-site form refused", http.StatusForbidden)
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "pipeline id must be a number", http.StatusBadRequest)
		return
	}
	pl, err := v.srv.RerunPipeline(id)
	switch {
	case errors.Is(err, gitlabfake.ErrNotFound):
		http.Error(w, fmt.Sprintf("no pipeline %d", id), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Pipeline-Id", strconv.FormatInt(pl.ID, 10))
	http.Redirect(w, r, "/-/jobs", http.StatusSeeOther)
}

// ansi matches the escape sequences and section markers of a trace.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]|section_(start|end):[0-9]+:[A-Za-z0-9_.-]+(\[[^\]]*\])?\r?`)

// readable is a trace for reading: escape sequences and section markers
// removed, each line's "<time> 00O " header shortened to the time of day.
func readable(trace []byte) string {
	s := ansi.ReplaceAllString(string(trace), "")
	return header.ReplaceAllStringFunc(s, func(h string) string {
		t, err := time.Parse("2006-01-02T15:04:05.000000Z", h[:27])
		if err != nil {
			return h
		}
		return t.Format("15:04:05 ")
	})
}

// header is a trace line's timestamp header (TRACE-03).
var header = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \d\d[OE][+ ]`)
