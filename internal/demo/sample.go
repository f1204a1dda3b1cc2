package demo

import (
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// Names of the sample's notable jobs.
const (
	// FailingJob fails on purpose (exit 3) and is allowed to fail, so the
	// pipeline goes on: its GitLab state is failed, script_failure.
	FailingJob = "test:broken"
	// BigJob asks, through MICROVM_MEM, for more memory than its runner's
	// envelope: the node holds it in its ledger until enough of the
	// node's room is free (NODE-09). It waits for capacity.
	BigJob = "test:big"
	// CacheJob restores and saves the `.deps/` cache: a cold run builds it,
	// a second pipeline reports "cache hit".
	CacheJob = "build"
)

// SampleTenant is one tenant's share of the sample: a project (a real git
// repository the fake GitLab serves) and one pipeline over it. Each tenant
// has its own GitLab server and relay (RELAY-01: one relay speaks to one
// GitLab), and the hub's capacity policy gives each relay's runners to the
// tenant with Weight.
type SampleTenant struct {
	// Name is the tenant's name in the capacity policy.
	Name string
	// Weight is its fair-share weight (ARB-09).
	Weight int
	// Project is the project's path, "namespace/name".
	Project string
	// Files are the repository's files, path → content.
	Files map[string]string
	// Pipeline is the pipeline to run.
	Pipeline gitlabfake.PipelineSpec
	// Want is each job's expected final GitLab state.
	Want map[string]gitlabfake.JobState
}

// JobCount returns how many jobs the sample's pipelines hold together.
func JobCount(ts []SampleTenant) int {
	n := 0
	for _, t := range ts {
		n += len(t.Pipeline.Jobs)
	}
	return n
}

// The repository: a tiny shell "app" with a build script that produces
// dist/ (passed on as an artifact), a dependency step that fills .deps/
// (kept in a cache), and test scripts that use both.
var sampleFiles = map[string]string{
	"README.md": "# shop\n\nA tiny shell app for the vk demo: build → test → deploy.\n",
	"app/greet.sh": `#!/bin/sh
# greet NAME: the whole app.
printf 'hello, %s\n' "${1:-world}"
`,
	"scripts/deps.sh": `#!/bin/sh
# deps.sh fills .deps/ unless the cache already restored it.
set -eu
if [ -f .deps/READY ]; then
  echo "deps: cache hit ($(cat .deps/READY))"
  exit 0
fi
echo "deps: cache miss, fetching dependencies"
mkdir -p .deps
i=0
while [ $i -lt 20 ]; do
  printf 'lib %d\n' $i > .deps/lib$i.txt
  i=$((i+1))
done
echo "built by pipeline $CI_PIPELINE_ID" > .deps/READY
echo "deps: 20 libraries ready"
`,
	"scripts/build.sh": `#!/bin/sh
# build.sh makes dist/: the app and a manifest naming the commit.
set -eu
mkdir -p dist
cp app/greet.sh dist/greet
chmod +x dist/greet
git rev-parse --short HEAD > dist/COMMIT
ls .deps/lib*.txt | wc -l | tr -d " " > dist/DEPS
echo "build: dist/ holds $(ls dist | wc -l | tr -d ' ') files for commit $(cat dist/COMMIT)"
`,
	"scripts/test.sh": `#!/bin/sh
# test.sh SHARD: checks the artifact the build stage passed on.
set -eu
shard=${1:-0}
test -x dist/greet || { echo "dist/greet missing: artifact not passed"; exit 1; }
out=$(./dist/greet "shard $shard")
echo "test shard $shard: $out"
[ "$out" = "hello, shard $shard" ]
i=0
while [ $i -lt 5 ]; do
  echo "shard $shard: case $i ok"
  i=$((i+1))
  sleep 0.3
done
`,
	"scripts/package.sh": `#!/bin/sh
# package.sh bundles dist/ into a release tarball.
set -eu
mkdir -p release
tar -czf release/shop.tar.gz dist
echo "package: release/shop.tar.gz $(wc -c < release/shop.tar.gz | tr -d ' ') bytes"
`,
}

func pathList(p ...string) []string { return p }

// webPipeline is the "web" tenant's pipeline: 11 jobs over build, test,
// deploy.
func webPipeline() gitlabfake.PipelineSpec {
	dist := []gitlabfake.Artifact{{Paths: pathList("dist/"), ExpireIn: "1 day"}}
	test := func(name, shard string) gitlabfake.JobSpec {
		return gitlabfake.JobSpec{Name: name, Stage: "test", Script: []string{"sh scripts/test.sh " + shard}}
	}
	return gitlabfake.PipelineSpec{
		Stages: []string{"build", "test", "deploy"},
		Jobs: []gitlabfake.JobSpec{
			{Name: CacheJob, Stage: "build",
				Script:    []string{"sh scripts/deps.sh", "sh scripts/build.sh"},
				Artifacts: dist,
				Cache:     []gitlabfake.Cache{{Key: "deps", Paths: pathList(".deps/")}}},
			test("test:unit-1", "1"),
			test("test:unit-2", "2"),
			test("test:unit-3", "3"),
			test("test:unit-4", "4"),
			{Name: "lint", Stage: "test", Script: []string{
				`for f in app/*.sh scripts/*.sh; do sh -n "$f" && echo "lint: $f ok"; done`}},
			{Name: FailingJob, Stage: "test", AllowFailure: true, Script: []string{
				`echo "this test is known to be broken"`,
				`./dist/greet broken | grep -q "goodbye" || { echo "expected a goodbye"; exit 3; }`}},
			{Name: BigJob, Stage: "test",
				Variables: []gitlabfake.Variable{{Key: "MICROVM_MEM", Value: "1536", Public: true}},
				Script: []string{
					`echo "a job asking for 1.5 GiB: it waits until the node has that much free"`,
					"sh scripts/test.sh big"}},
			{Name: "package", Stage: "deploy", Script: []string{"sh scripts/package.sh"},
				Artifacts: []gitlabfake.Artifact{{Paths: pathList("release/")}}},
			{Name: "report", Stage: "deploy", Script: []string{
				`echo "commit $(cat dist/COMMIT), $(cat dist/DEPS) dependencies"`}},
			{Name: "after", Stage: "deploy", Script: []string{`echo "deploy step"`},
				AfterScript: []string{`echo "after_script ran with CI_JOB_STATUS=$CI_JOB_STATUS"`}},
		},
	}
}

// dataPipeline is the "data" tenant's pipeline: 9 jobs over the same
// stages.
func dataPipeline() gitlabfake.PipelineSpec {
	dist := []gitlabfake.Artifact{{Paths: pathList("dist/")}}
	shard := func(i string) gitlabfake.JobSpec {
		return gitlabfake.JobSpec{Name: "transform-" + i, Stage: "test", Script: []string{"sh scripts/test.sh t" + i}}
	}
	return gitlabfake.PipelineSpec{
		Stages: []string{"build", "test", "deploy"},
		Jobs: []gitlabfake.JobSpec{
			{Name: CacheJob, Stage: "build",
				Script:    []string{"sh scripts/deps.sh", "sh scripts/build.sh"},
				Artifacts: dist,
				Cache:     []gitlabfake.Cache{{Key: "deps", Paths: pathList(".deps/")}}},
			shard("1"), shard("2"), shard("3"), shard("4"), shard("5"),
			{Name: "validate", Stage: "test", Script: []string{`test "$(cat dist/DEPS)" = 20 && echo "validate: 20 deps"`}},
			{Name: "load", Stage: "deploy", Script: []string{"sh scripts/package.sh"}},
			{Name: "notify", Stage: "deploy", Script: []string{`echo "loaded commit $(cat dist/COMMIT)"`}},
		},
	}
}

func wantAll(p gitlabfake.PipelineSpec) map[string]gitlabfake.JobState {
	w := make(map[string]gitlabfake.JobState, len(p.Jobs))
	for _, j := range p.Jobs {
		w[j.Name] = gitlabfake.StateSuccess
	}
	return w
}

// Sample returns the demo's sample: two tenants, "web" (weight 1, 11 jobs,
// one failing and one big) and "data" (weight 3, 9 jobs), each a project
// with a three-stage pipeline passing dist/ as an artifact and keeping
// .deps/ in a cache. Each call returns fresh values.
func Sample() []SampleTenant {
	web := SampleTenant{Name: "web", Weight: 1, Project: "web/shop", Files: copyFiles(sampleFiles), Pipeline: withTimeout(webPipeline())}
	web.Want = wantAll(web.Pipeline)
	web.Want[FailingJob] = gitlabfake.StateFailed
	data := SampleTenant{Name: "data", Weight: 3, Project: "data/etl", Files: copyFiles(sampleFiles), Pipeline: withTimeout(dataPipeline())}
	data.Want = wantAll(data.Pipeline)
	return []SampleTenant{web, data}
}

func copyFiles(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// sampleTimeout bounds each sample job (runner_info.timeout): a stuck
// demo fails fast instead of after GitLab's hour.
const sampleTimeout = 5 * time.Minute

func withTimeout(p gitlabfake.PipelineSpec) gitlabfake.PipelineSpec {
	for i := range p.Jobs {
		p.Jobs[i].Timeout = sampleTimeout
	}
	return p
}
