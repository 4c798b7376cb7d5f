package aggregate

import (
	"os"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/interp"
	"github.com/bpfcol/bpfcol/internal/process"
)

// loops is an interpreter whose loop is [0x100, 0x200), and records the
// frames it is asked to read.
type loops struct{ read []frame.Frame }

func (l *loops) Loops(uint32) []interp.Range   { return []interp.Range{{Start: 0x100, End: 0x200}} }
func (l *loops) Read(_ uint32, f *frame.Frame) { l.read = append(l.read, *f) }
func (l *loops) NewInterval()                  {}
func (l *loops) Place(uint32, *frame.Frame, *frame.Frame) interp.Placement {
	return interp.PlaceDrop
}

// describe renders a stack: native frames by address, interpreted ones by
// object, the marker as "T".
func describe(frames []frame.Frame) []string {
	var out []string
	for _, f := range frames {
		switch {
		case f.Truncated:
			out = append(out, "T")
		case f.Type.Interpreted():
			out = append(out, "py"+string(rune('a'+f.Address-1)))
		default:
			out = append(out, "n"+string(rune('0'+f.Address/0x100)))
		}
	}
	return out
}

// TestPlaceInterpreted places interpreted frames among native ones by the
// loop call that runs them: leafward of the k-th loop frame from the
// leaf, calls without frames left empty, what no loop frame takes at the
// root end (counted), the truncation marker where the walk cut.
func TestPlaceInterpreted(t *testing.T) {
	text := process.Mapping{Start: 0, End: 0x1000, Perms: "r-xp"}
	in := &loops{}
	a := New(Config{
		Interpreters: in,
		ProcessInfo: func(pid int) (*Process, error) {
			return &Process{PID: pid, Info: process.Info{ExePath: "/proc/self/exe"}, Mappings: []frame.Mapping{{Mapping: text}}}, nil
		},
	})
	// Native frames: a leaf at 0x310 (n3), callers returning into the loop
	// (0x181 -> n1, looked up at 0x180) and outside it (0x281 -> n2).
	py := func(obj uint64, anchor uint16) profiler.InterpFrame {
		return profiler.InterpFrame{Object: obj, Offset: 2, Anchor: anchor, Kind: profiler.InterpCPython}
	}
	for _, c := range []struct {
		name     string
		user     []uint64
		interp   []profiler.InterpFrame
		want     []string
		unplaced int64
	}{
		{"one loop call", []uint64{0x310, 0x181, 0x281},
			[]profiler.InterpFrame{py(1, 0), py(2, 0), py(3, 0)},
			[]string{"n3", "pya", "pyb", "pyc", "n1", "n2"}, 0},
		{"a loop call per frame", []uint64{0x310, 0x181, 0x281, 0x181, 0x181},
			[]profiler.InterpFrame{py(1, 0), py(2, 1), py(3, 2)},
			[]string{"n3", "pya", "n1", "n2", "pyb", "n1", "pyc", "n1"}, 0},
		{"a loop call without frames yet", []uint64{0x310, 0x181, 0x181},
			[]profiler.InterpFrame{py(1, 1), py(2, 1)},
			[]string{"n3", "n1", "pya", "pyb", "n1"}, 0},
		{"more calls than loop frames", []uint64{0x310, 0x181, 0x281},
			[]profiler.InterpFrame{py(1, 0), py(2, 1), py(3, 2)},
			[]string{"n3", "pya", "n1", "n2", "pyb", "pyc"}, 1},
		{"cut at the limit", []uint64{0x310, 0x181},
			[]profiler.InterpFrame{py(1, 0), py(2, 0), {Kind: profiler.InterpTruncated, Anchor: 0}},
			[]string{"n3", "pya", "pyb", "T", "n1"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			in.read = nil
			a.Add(&profiler.Sample{PID: uint32(os.Getpid()), TID: 1, Comm: "t", KtimeNs: 1, User: c.user, CFI: true, Interp: c.interp})
			b := a.Flush(time.Now())
			if len(b.Stacks) != 1 {
				t.Fatalf("%d stacks", len(b.Stacks))
			}
			got := describe(b.Stacks[0].Frames)
			if len(got) != len(c.want) {
				t.Fatalf("stack %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("stack %v, want %v", got, c.want)
				}
			}
			if b.Stats.UnplacedInterpreted != c.unplaced {
				t.Errorf("%d samples unplaced, want %d", b.Stats.UnplacedInterpreted, c.unplaced)
			}
			// Each interpreted frame of a new stack is read while the
			// process runs.
			if len(in.read) != len(c.interp) {
				t.Errorf("%d frames read, want %d", len(in.read), len(c.interp))
			}
		})
	}
}
