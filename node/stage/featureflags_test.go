package stage

import (
	"testing"

	"github.com/vk-ci/vk/proto/job"
)

// Feature flag values are expanded before they are parsed, as
// gitlab-runner's getVariablesForFeatureFlagResolution expands them: one
// pass against the job's variables, a flag the job does not set reading as
// its default, raw values left alone.
//
// spec: TRACE-03
func TestFlagValuesAreExpanded(t *testing.T) {
	tests := []struct {
		name   string
		vars   []job.Variable
		flag   string
		want   bool
		errors string
	}{
		{"variable", []job.Variable{{Key: "MY_FLAG", Value: "true"}, {Key: ffScriptSections, Value: "$MY_FLAG"}}, ffScriptSections, true, ""},
		{"braces", []job.Variable{{Key: ffScriptSections, Value: "${MY_FLAG}"}, {Key: "MY_FLAG", Value: "1"}}, ffScriptSections, true, ""},
		{"another flag's default", []job.Variable{{Key: "FF_USE_FASTZIP", Value: "$FF_USE_DIRECT_DOWNLOAD"}}, "FF_USE_FASTZIP", true, ""},
		{"another flag set", []job.Variable{{Key: ffLegacyBashEval, Value: "$FF_USE_FASTZIP"}, {Key: "FF_USE_FASTZIP", Value: "true"}}, ffLegacyBashEval, true, ""},
		{"timestamps", []job.Variable{{Key: "OFF", Value: "false"}, {Key: ffTimestamps, Value: "$OFF"}}, ffTimestamps, false, ""},
		{"one pass", []job.Variable{{Key: "A", Value: "$B"}, {Key: "B", Value: "true"}, {Key: ffScriptSections, Value: "$A"}}, ffScriptSections, false,
			"FF_SCRIPT_SECTIONS: could not parse feature flag, expected bool, got $B"},
		{"raw", []job.Variable{{Key: "MY_FLAG", Value: "true"}, {Key: ffScriptSections, Value: "$MY_FLAG", Raw: true}}, ffScriptSections, false,
			"FF_SCRIPT_SECTIONS: could not parse feature flag, expected bool, got $MY_FLAG"},
		{"unset variable", []job.Variable{{Key: ffScriptSections, Value: "$NOPE"}}, ffScriptSections, false,
			"FF_SCRIPT_SECTIONS: could not parse feature flag, expected bool, got "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &job.CiJob{Variables: tc.vars}
			if got := resolveFlags(j)[tc.flag]; got != tc.want {
				t.Errorf("%s = %v, want %v", tc.flag, got, tc.want)
			}
			want := tc.errors
			if want != "" {
				want += "\n" + want // gitlab-runner reports each twice
			}
			if got := flagErrors(j); got != want {
				t.Errorf("flagErrors = %q, want %q", got, want)
			}
		})
	}
}
