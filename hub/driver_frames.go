package hub

// Session frames reach the driver in two forms: the session layer decodes
// them into pointers (dispatch.Decode, client.DecodeRelayFrame return
// *Report, *Heartbeat, …) while in-process callers and tests pass values.
// The driver's handlers take values; frameAs and onFrame accept both, so
// each handler is named once in its table (nodeFrames, relayFrames)
// instead of once per form.

// frameAs returns m as a T when m is a T or a *T (dereferenced; a nil *T
// panics: the decoders never yield one). ok is false for any other type.
func frameAs[T any](m any) (v T, ok bool) {
	switch m := m.(type) {
	case T:
		return m, true
	case *T:
		return *m, true
	}
	return v, false
}

// onFrame adapts handle, a driver method for one frame type T on a
// session's record R (*nodeRec, *relayRec), into a table entry: the entry
// calls handle and returns true when m is a T or *T, and returns false
// without calling it otherwise.
func onFrame[R, T any](handle func(*Driver, R, T)) func(*Driver, R, any) bool {
	return func(d *Driver, r R, m any) bool {
		v, ok := frameAs[T](m)
		if ok {
			handle(d, r, v)
		}
		return ok
	}
}
