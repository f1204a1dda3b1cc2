package dispatch

import "testing"

func benchFrames() map[string]Frame {
	return map[string]Frame{
		"start":     {Seq: 1, Msg: &Start{Job: "job-1", Reservation: "res-9", Envelope: envelope, Spec: sampleSpec()}},
		"output256": {Seq: 2, Msg: &Output{Job: "job-1", Offset: 1 << 30, Data: make([]byte, MaxOutputChunk)}},
		"heartbeat": {Seq: 3, Msg: &Heartbeat{State: NodeReady, Load1: &load, Jobs: 3}},
	}
}

func BenchmarkEncode(b *testing.B) {
	for name, f := range benchFrames() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for name, f := range benchFrames() {
		wire, err := Encode(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				if _, err := Decode(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
