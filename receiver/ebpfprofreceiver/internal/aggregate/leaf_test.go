package aggregate

import (
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// TestLeafCachesForgetIdleEntries checks that analysed functions and PCs'
// answers unused for leafMaxIdle go at the next one stored: a PC is keyed
// by file, and each copy of a binary a process runs is a new file, so the
// answers of exited processes would otherwise fill the caches to their
// bounds.
func TestLeafCachesForgetIdleEntries(t *testing.T) {
	l := newLeafAnalyzer(nil)
	now := time.Now()
	clock := func() time.Time { return now }
	l.functions.SetClock(clock)
	l.slots.SetClock(clock)
	for i := range uint64(3) {
		l.functions.Add(functionKey{binary: i, start: 0x1000}, nil)
		l.slots.Add(pcKey{file: process.FileKey{Dev: 1, Ino: i}, offset: 0x1000}, 8)
	}
	now = now.Add(leafMaxIdle + time.Second)
	l.functions.Add(functionKey{binary: 9, start: 0x1000}, nil)
	l.slots.Add(pcKey{file: process.FileKey{Dev: 1, Ino: 9}, offset: 0x1000}, 0)
	if f, s := l.functions.Stats(), l.slots.Stats(); f.Len != 1 || f.Expired != 3 || s.Len != 1 || s.Expired != 3 {
		t.Errorf("functions %+v, slots %+v: want the 3 idle entries of each expired", f, s)
	}
}

// TestLostCallerCandidateHasItsCall: a word at SP equal to the start of an
// executable mapping (the first page of a young stack, as a snapshot taken
// at exec shows it) is no return address: its call would be outside. One
// equal to the end has its call as the mapping's last instruction (a call
// to a function that does not return can end a text segment).
func TestLostCallerCandidateHasItsCall(t *testing.T) {
	m := process.Mapping{Start: 0x7fffffffe000, End: 0x7ffffffff000, Perms: "rwxp", Path: "[stack]"}
	proc := &Process{Mappings: []frame.Mapping{{Mapping: m}}}
	l := newLeafAnalyzer(nil)
	for _, c := range []struct {
		word uint64
		want bool
	}{{m.Start, false}, {m.Start + 1, true}, {m.End, true}, {m.End + 1, false}} {
		s := &profiler.Sample{LeafWordsValid: true, LeafWords: [2]uint64{c.word}}
		if got := l.candidate(proc, s, 0); got != c.want {
			t.Errorf("candidate(%#x) = %v, want %v", c.word, got, c.want)
		}
	}
}
