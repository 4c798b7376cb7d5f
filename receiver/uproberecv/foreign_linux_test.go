package uproberecv

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// foreignCounter is another tool's uprobe program: it counts its runs in
// a one-entry array, as a bpftrace count() would.
type foreignCounter struct {
	prog  *ebpf.Program
	count *ebpf.Map
}

func newForeignCounter(t *testing.T) *foreignCounter {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.Kprobe,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("loading the foreign counter: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return &foreignCounter{prog: prog, count: m}
}

func (c *foreignCounter) value(t *testing.T) uint64 {
	t.Helper()
	var v uint64
	if err := c.count.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestForeignUprobesOnSameFunction puts another tool's uprobe and
// uretprobe on the probed function (perf-event uprobes, as bpftrace
// attaches), one pair before the receiver attaches and one after, and
// runs recursive calls of 1 to 100 levels: the receiver's records stay
// exact (one per outermost call, inside it by the workload's clock,
// counting every inner call), and so do the other tool's counts (one per
// entry; one per return the kernel hooks, 64 at most per thread).
func TestForeignUprobesOnSameFunction(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "deeprec.c", "-O2", "-g")
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatal(err)
	}
	attach := func() (entries, returns *foreignCounter) {
		entries, returns = newForeignCounter(t), newForeignCounter(t)
		up, err := ex.Uprobe("rec", entries.prog, nil)
		if err != nil {
			t.Fatalf("another tool's uprobe: %v", err)
		}
		t.Cleanup(func() { up.Close() })
		ret, err := ex.Uretprobe("rec", returns.prog, nil)
		if err != nil {
			t.Fatalf("another tool's uretprobe: %v", err)
		}
		t.Cleanup(func() { ret.Close() })
		return entries, returns
	}
	beforeEntries, beforeReturns := attach()
	cfg := &Config{Probes: []ProbeConfig{{ID: "rec", Binary: bin, Entry: "rec", Exit: "return"}}}
	r, sink := startReceiver(t, cfg, options{})
	afterEntries, afterReturns := attach()

	depths := []int{0, 5, 40, 100, 1, 63, 64, 2}
	var args []string
	var wantEntries, wantReturns uint64
	for _, d := range depths {
		args = append(args, strconv.Itoa(d))
		wantEntries += uint64(d + 1)
		wantReturns += uint64(min(d+1, maxPendingReturns))
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	type call struct{ depth, start, end int64 }
	var calls []call
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var c call
		if _, err := fmt.Sscanf(line, "call %d %d %d", &c.depth, &c.start, &c.end); err != nil {
			t.Fatalf("workload printed %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	pid := int64(cmd.Process.Pid)
	var recs []scopeLog
	waitFor(5*time.Second, func() bool {
		recs = recordsByPID(flatten(sink), "rec")[pid]
		return len(recs) >= len(calls)
	})
	c, _ := r.probes.Counters()
	t.Logf("%d records for %d calls; counters %+v; the other tool counted %d/%d and %d/%d entries/returns",
		len(recs), len(calls), c, beforeEntries.value(t), beforeReturns.value(t), afterEntries.value(t), afterReturns.value(t))
	if len(recs) != len(calls) || c.ExitWithoutEntry != 0 {
		t.Fatalf("%d records for %d calls, %d exits without entry", len(recs), len(calls), c.ExitWithoutEntry)
	}
	offset := testworkload.MonotonicToUnix()
	const slack = int64(100 * time.Microsecond)
	for i, l := range recs {
		if start, end := l.startUnix-offset, l.endUnix-offset; start < calls[i].start-slack || end > calls[i].end+slack {
			t.Errorf("call %d (depth %d): its record (%d..%d) lies outside it (%d..%d)", i, calls[i].depth, start, end, calls[i].start, calls[i].end)
		}
		if l.nested != calls[i].depth {
			t.Errorf("call %d (depth %d): record counts %d nested calls", i, calls[i].depth, l.nested)
		}
	}
	for _, fc := range []struct {
		name string
		c    *foreignCounter
		want uint64
	}{
		{"entries (attached before)", beforeEntries, wantEntries},
		{"returns (attached before)", beforeReturns, wantReturns},
		{"entries (attached after)", afterEntries, wantEntries},
		{"returns (attached after)", afterReturns, wantReturns},
	} {
		if got := fc.c.value(t); got != fc.want {
			t.Errorf("the other tool counted %d %s, want %d", got, fc.name, fc.want)
		}
	}
}
