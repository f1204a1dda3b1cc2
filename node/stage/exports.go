package stage

import (
	"path"
	"runtime"
	"strconv"

	"github.com/vk-ci/vk/proto/job"
)

// exports returns the variables every stage script exports (STAGE-05), in
// gitlab-runner's GetAllVariables order: every feature flag with its
// resolved value; CI_JOB_IMAGE when the job names one; the node's own
// (CI_BUILDS_DIR, CI_PROJECT_DIR, CI_CONCURRENT_ID, CI_CONCURRENT_PROJECT_ID,
// CI_SERVER, CI_JOB_STATUS, CI_JOB_TIMEOUT,
// CI_SERVER_TLS_CA_FILE as a file); the job's in order (expanded unless
// raw; file variables as files; its FF_* give way to the resolved ones);
// then CI_DISPOSABLE_ENVIRONMENT, the node's CI_RUNNER_VERSION and
// CI_RUNNER_EXECUTABLE_ARCH and RUNNER_TEMP_PROJECT_DIR.
func (x *run) exports(status string) []exportVar {
	type v struct {
		key, value string
		file, raw  bool
	}
	all := make([]v, 0, len(featureFlags)+len(x.job.Variables)+16)
	for _, f := range featureFlags {
		all = append(all, v{key: f.name, value: strconv.FormatBool(x.ff[f.name]), raw: true})
	}
	if img := x.job.Image; img != nil && img.Name != "" {
		all = append(all, v{key: "CI_JOB_IMAGE", value: img.Name, raw: true})
	}
	timeout := x.job.TimeoutSecs
	if timeout <= 0 {
		timeout = 7200
	}
	all = append(all,
		v{key: "CI_BUILDS_DIR", value: x.ej.BuildsDir(), raw: true},
		v{key: "CI_PROJECT_DIR", value: x.projectDir, raw: true},
		v{key: "CI_CONCURRENT_ID", value: strconv.Itoa(x.concurrentID), raw: true},
		v{key: "CI_CONCURRENT_PROJECT_ID", value: strconv.Itoa(x.projectConcurrentID), raw: true},
		v{key: "CI_SERVER", value: "yes", raw: true},
		v{key: "CI_JOB_STATUS", value: status, raw: true},
		v{key: "CI_JOB_TIMEOUT", value: strconv.FormatInt(timeout, 10), raw: true},
	)
	if x.job.ServerCAPEM != "" {
		all = append(all, v{key: "CI_SERVER_TLS_CA_FILE", value: x.job.ServerCAPEM, file: true, raw: true})
	}
	for _, jv := range x.job.Variables {
		if isFeatureFlag(jv.Key) {
			continue
		}
		all = append(all, v{key: jv.Key, value: jv.Value, file: jv.File, raw: jv.Raw})
	}
	// Each job has an environment of its own, removed after it: the
	// disposable kind, as gitlab-runner's Docker executor says.
	all = append(all,
		v{key: "CI_DISPOSABLE_ENVIRONMENT", value: "true", raw: true},
		v{key: "CI_RUNNER_VERSION", value: x.r.cfg.Version, raw: true},
		v{key: "CI_RUNNER_EXECUTABLE_ARCH", value: runtime.GOOS + "/" + runtime.GOARCH, raw: true},
		v{key: "RUNNER_TEMP_PROJECT_DIR", value: x.tmpDir, raw: true},
	)
	// Expansion sees every variable, the last of a key winning, a file
	// variable as its path.
	lookup := func(key string) (string, bool) {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].key == key {
				if all[i].file {
					return path.Join(x.tmpDir, key), true
				}
				return all[i].value, true
			}
		}
		return "", false
	}
	out := make([]exportVar, 0, len(all))
	for _, e := range all {
		val := e.value
		if !e.raw {
			val = job.Expand(val, lookup)
		}
		out = append(out, exportVar{Key: e.key, Value: val, File: e.file})
	}
	return out
}
