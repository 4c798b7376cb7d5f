package aggregate

import (
	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
)

// placeJIT appends to out what stands for native[i], the native frame a
// JIT runtime's frame jf is anchored at, as the runtime places it: jf in
// its place, the native frame alone, or both when the native frame is code
// jf called without a frame of its own (a builtin). Then jf's own code,
// where its line is, is the return address such a frameless callee leaves
// on the stack: the caller the walk lost and the aggregator put back next
// (took reports that it is taken in), or, at the leaf, a word at SP.
func (a *Aggregator) placeJIT(proc *Process, s *profiler.Sample, native []frame.Frame, i int, jf frame.Frame, out []frame.Frame) (_ []frame.Frame, took bool) {
	f := native[i]
	orig := jf
	jf.Native, jf.ReturnAddress = f.Address, f.ReturnAddress
	switch a.cfg.Interpreters.Place(s.PID, &f, &jf) {
	case interp.PlaceReplace:
		return append(out, jf), false
	case interp.PlaceCaller:
	default:
		return append(out, f), false
	}
	out = append(out, f)
	// at tries the native frame c as jf's own code.
	at := func(c frame.Frame) (frame.Frame, bool) {
		try := orig
		try.Native, try.ReturnAddress = c.Address, c.ReturnAddress
		return try, a.cfg.Interpreters.Place(s.PID, &c, &try) == interp.PlaceReplace
	}
	if i+1 < len(native) && a.userIndex[i+1] < 0 {
		if try, ok := at(native[i+1]); ok {
			return append(out, try), true
		}
	} else if i == 0 && s.LeafWordsValid && proc != nil {
		for _, w := range s.LeafWords {
			c := frame.AtReturnAddress(frame.Native, w)
			if !possibleFrame(proc, c) || len(s.User) > 1 && s.User[1] == w {
				continue
			}
			c.Mapping = proc.Mapping(c.Address)
			if try, ok := at(c); ok {
				return append(out, try), false
			}
		}
	}
	return append(out, jf), false
}
