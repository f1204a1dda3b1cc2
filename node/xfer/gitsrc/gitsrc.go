// Package gitsrc is the node's host-side get_sources stage: it checks the
// job's commit out with the real git binary as gitlab-runner's bash shell
// does (shells/abstract.go writeRefspecFetchCmd, writeCheckoutCmd,
// writeSubmoduleUpdateCmd), honouring GIT_STRATEGY, GIT_DEPTH, refspecs,
// GIT_SUBMODULE_STRATEGY, GIT_CHECKOUT and GIT_CLEAN_FLAGS (STAGE-02).
//
// The job token reaches git only through a credential helper (STAGE-03):
// a 0700 script in a private temp dir that prints the password from an
// environment variable of the git process. The token is never part of a
// URL, a command line, a file, .git/config or the trace. The helper and the
// server CA (http.sslCAInfo) are configured through GIT_CONFIG_COUNT
// environment variables, so nothing persists in the checkout's config, and
// the helper answers only for GitLab's own origin.
//
// Reuse: with the fetch strategy an existing checkout in [Options.Dir] is
// fetched into (gitlab-runner's behaviour); the caller keeps one stable
// directory per project (and concurrency slot) on the node so that the
// previous job's checkout is found there. clone removes the directory
// first; none and empty skip git entirely. A reused .git was writable by
// the previous job of the project: hooks (core.hooksPath=/dev/null) and
// fsmonitor are disabled for every git command, but other planted
// configuration is trusted as gitlab-runner trusts it; a node that runs
// mutually distrusting pipelines of one project should use clone.
package gitsrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Strategy is GIT_STRATEGY.
type Strategy string

// Strategies; "" means [Fetch], as in gitlab-runner.
const (
	Fetch Strategy = "fetch" // reuse the checkout in Dir when there is one
	Clone Strategy = "clone" // remove Dir, then fetch into a fresh repository
	None  Strategy = "none"  // leave Dir as is (create it if missing)
	Empty Strategy = "empty" // make Dir an empty directory
)

// SubmoduleStrategy is GIT_SUBMODULE_STRATEGY.
type SubmoduleStrategy string

// Submodule strategies; "" means [SubmodulesNone].
const (
	SubmodulesNone      SubmoduleStrategy = "none"
	SubmodulesNormal    SubmoduleStrategy = "normal"
	SubmodulesRecursive SubmoduleStrategy = "recursive"
)

// DefaultCleanFlags is GIT_CLEAN_FLAGS when unset.
const DefaultCleanFlags = "-ffdx"

var (
	// ErrGit is wrapped by errors from a failing git command; get_sources
	// fails with it (FAIL-06: external_dependency).
	ErrGit = errors.New("gitsrc: git command failed")
	// ErrOptions is returned for invalid options (bad strategy, URL, sha).
	ErrOptions = errors.New("gitsrc: invalid options")
)

// Options describe one checkout.
type Options struct {
	// RepoURL is the project's clone URL. Any user info in it (GitLab's
	// repo_url carries gitlab-ci-token:<token>) is dropped.
	RepoURL string
	// Token is the job token, supplied through the credential helper as
	// the password of user gitlab-ci-token.
	Token string
	// Ref is the branch or tag name, for the trace line.
	Ref string
	// SHA is the commit to check out (full hex).
	SHA string
	// Refspecs to fetch; empty means all branches and tags.
	Refspecs []string
	// Depth is GIT_DEPTH; 0 means a full fetch.
	Depth int
	// Strategy is GIT_STRATEGY.
	Strategy Strategy
	// Submodules is GIT_SUBMODULE_STRATEGY.
	Submodules SubmoduleStrategy
	// NoCheckout is GIT_CHECKOUT=false (fetch only).
	NoCheckout bool
	// CleanFlags is GIT_CLEAN_FLAGS split on spaces; "" means
	// [DefaultCleanFlags], "none" disables git clean.
	CleanFlags string
	// Dir is the build directory (the checkout's work tree).
	Dir string
	// CAPEM is GitLab's CA certificate(s) in PEM; empty means the system
	// roots.
	CAPEM []byte
	// PreHook and PostHook run before the fetch and after the checkout
	// (pre_get_sources_script / post_get_sources_script); nil means none.
	// Their error fails the stage.
	PreHook, PostHook func(ctx context.Context) error
	// ObjectFormat is the repository's hash ("sha1" or "sha256"); "" means
	// sha1. It applies when the repository is created.
	ObjectFormat string
	// Git is the git binary; "" means "git" from PATH.
	Git string
	// CorrelationID, when set, is sent with every git HTTP request as
	// X-Gitaly-Correlation-ID and printed before the fetch, as
	// gitlab-runner does with FF_USE_GITALY_CORRELATION_ID.
	CorrelationID string
}

// GetSources runs the get_sources stage into trace (nil discards). It
// returns an error wrapping [ErrGit] when git fails, [ErrOptions] for bad
// input, or the hooks' or context's error.
func GetSources(ctx context.Context, o Options, trace io.Writer) error {
	if trace == nil {
		trace = io.Discard
	}
	if o.Strategy == "" {
		o.Strategy = Fetch
	}
	if o.Submodules == "" {
		o.Submodules = SubmodulesNone
	}
	switch o.Strategy {
	case Fetch, Clone, None, Empty:
	default:
		return fmt.Errorf("%w: GIT_STRATEGY %q", ErrOptions, o.Strategy)
	}
	switch o.Submodules {
	case SubmodulesNone, SubmodulesNormal, SubmodulesRecursive:
	default:
		return fmt.Errorf("%w: GIT_SUBMODULE_STRATEGY %q", ErrOptions, o.Submodules)
	}
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		return fmt.Errorf("%w: build dir %q must be absolute", ErrOptions, o.Dir)
	}
	if o.PreHook != nil {
		if err := o.PreHook(ctx); err != nil {
			return fmt.Errorf("gitsrc: pre_get_sources hook: %w", err)
		}
	}
	switch o.Strategy {
	case None:
		fmt.Fprintln(trace, notice("Skipping Git repository setup"))
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return err
		}
		fmt.Fprintln(trace, notice("Skipping Git checkout"))
		fmt.Fprintln(trace, notice("Skipping Git submodules setup"))
		return runPost(ctx, o)
	case Empty:
		fmt.Fprintln(trace, notice("Skipping Git repository setup and creating an empty build directory"))
		if err := os.RemoveAll(o.Dir); err != nil {
			return err
		}
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return err
		}
		fmt.Fprintln(trace, notice("Skipping Git checkout"))
		fmt.Fprintln(trace, notice("Skipping Git submodules setup"))
		return runPost(ctx, o)
	}
	if len(o.SHA) < 8 || strings.Trim(o.SHA, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: sha %q", ErrOptions, o.SHA)
	}
	repo, err := cleanURL(o.RepoURL)
	if err != nil {
		return err
	}
	g, err := newGitEnv(o, repo)
	if err != nil {
		return err
	}
	defer g.close()
	if o.Strategy == Clone {
		if err := os.RemoveAll(o.Dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if err := g.fetch(ctx, o, repo, trace); err != nil {
		return err
	}
	if o.NoCheckout {
		fmt.Fprintln(trace, notice("Skipping Git checkout"))
	} else if err := g.checkout(ctx, o, trace); err != nil {
		return err
	}
	if err := g.submodules(ctx, o, trace); err != nil {
		return err
	}
	return runPost(ctx, o)
}

func runPost(ctx context.Context, o Options) error {
	if o.PostHook != nil {
		if err := o.PostHook(ctx); err != nil {
			return fmt.Errorf("gitsrc: post_get_sources hook: %w", err)
		}
	}
	return nil
}

// notice formats a gitlab-runner Noticef line (bold green).
func notice(s string) string { return "\x1b[32;1m" + s + "\x1b[0;m" }

func cleanURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		// Do not echo raw: it may hold the token.
		return nil, fmt.Errorf("%w: repository URL is not an absolute URL", ErrOptions)
	}
	u.User = nil
	return u, nil
}

// gitEnv runs git with the credential helper and CA configured through
// the environment.
type gitEnv struct {
	bin    string
	tmp    string   // private dir with the helper (and the CA file)
	env    []string // full environment of every git command
	origin string
}

const tokenEnv = "VK_GIT_JOB_TOKEN"

func newGitEnv(o Options, repo *url.URL) (*gitEnv, error) {
	g := &gitEnv{bin: o.Git}
	if g.bin == "" {
		g.bin = "git"
	}
	tmp, err := os.MkdirTemp("", "vk-git-")
	if err != nil {
		return nil, err
	}
	g.tmp = tmp
	helper := filepath.Join(tmp, "credential-helper")
	// The helper answers only "get"; the token comes from the
	// environment git passes down, never from argv or a file.
	script := "#!/bin/sh\ntest \"$1\" = get || exit 0\ncat >/dev/null\necho username=gitlab-ci-token\necho \"password=$" + tokenEnv + "\"\n"
	if err := os.WriteFile(helper, []byte(script), 0o700); err != nil {
		g.close()
		return nil, err
	}
	g.origin = repo.Scheme + "://" + repo.Host
	cfg := [][2]string{
		{"credential.helper", ""}, // drop any helper from system/global config
		{"credential." + g.origin + ".helper", helper},
		{"core.askPass", "/bin/false"},
		{"init.defaultBranch", "main"},
		{"advice.detachedHead", "false"},
		{"protocol.file.allow", "user"},
		// A reused checkout's .git was writable by the previous job:
		// never run its hooks or fsmonitor with this job's token in the
		// environment.
		{"core.hooksPath", "/dev/null"},
		{"core.fsmonitor", "false"},
	}
	if o.CorrelationID != "" {
		cfg = append(cfg, [2]string{"http.extraHeader", "X-Gitaly-Correlation-ID: " + o.CorrelationID})
	}
	if len(o.CAPEM) > 0 {
		ca := filepath.Join(tmp, "ca.pem")
		if err := os.WriteFile(ca, o.CAPEM, 0o600); err != nil {
			g.close()
			return nil, err
		}
		cfg = append(cfg, [2]string{"http.sslCAInfo", ca})
	}
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") || k == tokenEnv {
			continue // no inherited GIT_DIR, GIT_CONFIG_*, …
		}
		env = append(env, kv)
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		tokenEnv+"="+o.Token, "GIT_CONFIG_COUNT="+strconv.Itoa(len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	g.env = env
	return g, nil
}

func (g *gitEnv) close() { os.RemoveAll(g.tmp) }

// run runs git in dir with stdout and stderr going to trace.
func (g *gitEnv) run(ctx context.Context, dir string, trace io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = dir
	cmd.Env = g.env
	cmd.Stdout, cmd.Stderr = trace, trace
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: git %s: %v", ErrGit, args[0], err)
	}
	return nil
}

// ok runs git silently and reports success.
func (g *gitEnv) ok(ctx context.Context, dir string, args ...string) bool {
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = dir
	cmd.Env = g.env
	return cmd.Run() == nil
}

func (g *gitEnv) fetch(ctx context.Context, o Options, repo *url.URL, trace io.Writer) error {
	if o.CorrelationID != "" {
		fmt.Fprintln(trace, notice("Gitaly correlation ID: "+o.CorrelationID))
	}
	var depthArgs []string
	if o.Depth > 0 {
		depthArgs = []string{"--depth", strconv.Itoa(o.Depth)}
		fmt.Fprintln(trace, notice(fmt.Sprintf("Fetching changes with git depth set to %d...", o.Depth)))
	} else {
		fmt.Fprintln(trace, notice("Fetching changes..."))
	}
	initArgs := []string{"init", o.Dir}
	if o.ObjectFormat == "sha256" {
		initArgs = append(initArgs, "--object-format=sha256")
	}
	if err := g.run(ctx, o.Dir, trace, initArgs...); err != nil {
		return err
	}
	// A crashed earlier job may have left lock files behind.
	for _, f := range []string{"index.lock", "shallow.lock", "HEAD.lock", "hooks/post-checkout", "config.lock"} {
		os.Remove(filepath.Join(o.Dir, ".git", f))
	}
	if g.ok(ctx, o.Dir, "remote", "add", "origin", repo.String()) {
		fmt.Fprintln(trace, notice("Created fresh repository."))
	} else if err := g.run(ctx, o.Dir, trace, "remote", "set-url", "origin", repo.String()); err != nil {
		return err
	}
	refspecs := o.Refspecs
	if len(refspecs) == 0 {
		refspecs = []string{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"}
	}
	args := append([]string{"fetch", "origin", "--no-recurse-submodules"}, refspecs...)
	args = append(args, depthArgs...)
	args = append(args, "--prune", "--quiet")
	return g.run(ctx, o.Dir, trace, args...)
}

func (g *gitEnv) checkout(ctx context.Context, o Options, trace io.Writer) error {
	fmt.Fprintln(trace, notice(fmt.Sprintf("Checking out %s as detached HEAD (ref is %s)...", o.SHA[:8], o.Ref)))
	if err := g.run(ctx, o.Dir, trace, "-c", "submodule.recurse=false", "checkout", "-f", "-q", o.SHA); err != nil {
		return err
	}
	if flags := cleanFlags(o.CleanFlags); len(flags) > 0 {
		if err := g.run(ctx, o.Dir, trace, append([]string{"clean"}, flags...)...); err != nil {
			return err
		}
	}
	return nil
}

func cleanFlags(s string) []string {
	switch strings.TrimSpace(s) {
	case "":
		return strings.Fields(DefaultCleanFlags)
	case "none":
		return nil
	}
	return strings.Fields(s)
}

func (g *gitEnv) submodules(ctx context.Context, o Options, trace io.Writer) error {
	var rec []string
	switch o.Submodules {
	case SubmodulesNone:
		fmt.Fprintln(trace, notice("Skipping Git submodules setup"))
		return nil
	case SubmodulesNormal:
		fmt.Fprintln(trace, notice("Updating/initializing submodules..."))
	case SubmodulesRecursive:
		rec = []string{"--recursive"}
		fmt.Fprintln(trace, notice("Updating/initializing submodules recursively..."))
	}
	steps := [][]string{
		append([]string{"submodule", "sync"}, rec...),
		append(append([]string{"submodule", "update", "--init"}, rec...), depthFlag(o.Depth)...),
		append(append([]string{"submodule", "foreach"}, rec...), "git clean -ffdx"),
	}
	for _, args := range steps {
		if err := g.run(ctx, o.Dir, trace, args...); err != nil {
			return err
		}
	}
	return nil
}

func depthFlag(d int) []string {
	if d > 0 {
		return []string{"--depth", strconv.Itoa(d)}
	}
	return nil
}
