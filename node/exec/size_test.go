package exec

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// spec: NODE-09, NODE-17
func TestSizeJob(t *testing.T) {
	def := Size{CPUs: 2, MemMiB: 2048}
	ceil := Size{CPUs: 8, MemMiB: 16384}
	tests := []struct {
		name      string
		in        SizeInput
		want      Size
		wantNotes int
	}{
		{"default", SizeInput{}, def, 0},
		{"variables", SizeInput{CPUsVar: "4", MemVar: "4096"}, Size{4, 4096}, 0},
		{"mem with unit", SizeInput{MemVar: "3G"}, Size{2, 3072}, 0},
		{"mem MiB unit", SizeInput{MemVar: "512MiB"}, Size{2, 512}, 0},
		{"hint", SizeInput{Script: []string{"echo hi", "# vk:hint cpus=3 mem=1G"}}, Size{3, 1024}, 0},
		{"hint inside multi-line command", SizeInput{Script: []string{"echo a\n  # vk:hint mem=700\necho b"}}, Size{2, 700}, 0},
		{"variables beat hint", SizeInput{CPUsVar: "1", Script: []string{"# vk:hint cpus=6 mem=6G"}}, Size{1, 6144}, 0},
		{"clamped", SizeInput{CPUsVar: "64", MemVar: "64G"}, ceil, 2},
		{"bad values keep defaults", SizeInput{CPUsVar: "lots", MemVar: "12T"}, def, 2},
		{"bad hint ignored", SizeInput{Script: []string{"# vk:hint gpus=1"}}, def, 1},
		{"first hint wins", SizeInput{Script: []string{"# vk:hint cpus=3", "# vk:hint cpus=5"}}, Size{3, 2048}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Default, tc.in.Ceiling = def, ceil
			got, notes := SizeJob(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("SizeJob() (-want +got):\n%s", diff)
			}
			if len(notes) != tc.wantNotes {
				t.Errorf("notes = %q, want %d of them", notes, tc.wantNotes)
			}
		})
	}
}

// spec: NODE-17
func TestSizeJobNeverExceedsCeiling(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ceil := Size{CPUs: rapid.IntRange(0, 64).Draw(t, "ccpu"), MemMiB: rapid.Int64Range(0, 1<<20).Draw(t, "cmem")}
		in := SizeInput{
			CPUsVar: rapid.StringMatching(`[0-9]{0,4}`).Draw(t, "cpus"),
			MemVar:  rapid.StringMatching(`[0-9]{0,7}(G|M|)`).Draw(t, "mem"),
			Default: Size{CPUs: rapid.IntRange(0, 128).Draw(t, "dcpu"), MemMiB: rapid.Int64Range(0, 1<<21).Draw(t, "dmem")},
			Ceiling: ceil,
		}
		got, _ := SizeJob(in)
		if ceil.CPUs > 0 && got.CPUs > ceil.CPUs || ceil.MemMiB > 0 && got.MemMiB > ceil.MemMiB {
			t.Fatalf("SizeJob(%+v) = %+v over the ceiling", in, got)
		}
	})
}
