package enum

import "testing"

type color string

// TestParse: known values and absence pass, anything else is other.
//
// spec: API-55, NSESS-22
func TestParse(t *testing.T) {
	known := []color{"red", "blue", "other"}
	for in, want := range map[string]color{"red": "red", "blue": "blue", "": "", "green": "other", "RED": "other", "other": "other"} {
		if got := Parse(in, color("other"), known); got != want {
			t.Errorf("Parse(%q) = %q, want %q", in, got, want)
		}
	}
	if !Known(color("red"), known) || Known(color("green"), known) {
		t.Error("Known wrong")
	}
}
