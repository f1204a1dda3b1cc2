package hub

import (
	"reflect"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// Every command a leader sends carries its epoch, in the form it was
// given (value or pointer), on a copy: the frame the driver holds is left
// as it was. Frames that are not commands pass unchanged, and epoch 0
// (no lease) stamps nothing.
func TestWithEpoch(t *testing.T) {
	commands := []dispatch.Message{
		dispatch.Offer{Reservation: "r"}, &dispatch.Offer{Reservation: "r"},
		dispatch.Renew{Reservation: "r"}, &dispatch.Renew{Reservation: "r"},
		dispatch.Release{Reservation: "r"}, &dispatch.Release{Reservation: "r"},
		dispatch.Start{Job: "j"}, &dispatch.Start{Job: "j"},
		dispatch.Cancel{Job: "j"}, &dispatch.Cancel{Job: "j"},
		dispatch.OutputAck{Job: "j"}, &dispatch.OutputAck{Job: "j"},
		dispatch.Settings{Ceiling: 2}, &dispatch.Settings{Ceiling: 2},
	}
	epochOf := func(m dispatch.Message) uint64 {
		v := reflect.Indirect(reflect.ValueOf(m))
		return v.FieldByName("Epoch").Uint()
	}
	for _, m := range commands {
		got := withEpoch(m, 7)
		if reflect.TypeOf(got) != reflect.TypeOf(m) {
			t.Errorf("%T came back as %T", m, got)
			continue
		}
		if e := epochOf(got); e != 7 {
			t.Errorf("%T: epoch %d, want 7", m, e)
		}
		if e := epochOf(m); e != 0 {
			t.Errorf("%T: the original was changed (epoch %d)", m, e)
		}
		if e := epochOf(withEpoch(m, 0)); e != 0 {
			t.Errorf("%T: epoch 0 stamped %d", m, e)
		}
	}
	for _, m := range []dispatch.Message{&dispatch.Held{}, dispatch.Heartbeat{}, &dispatch.Report{}} {
		if got := withEpoch(m, 7); !reflect.DeepEqual(got, m) {
			t.Errorf("%T is not a command but came back %+v", m, got)
		}
	}
}
