package resolve

import (
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/kernelsym"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/aggregate"
)

//go:noinline
func probeTarget() int { return len(os.Args) }

// ownProcess describes this test process the way the aggregator would.
func ownProcess(t *testing.T) *aggregate.Process {
	t.Helper()
	maps, err := process.ReadMappings(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var exec []frame.Mapping
	for _, m := range maps {
		if m.Executable() {
			exec = append(exec, frame.Mapping{Mapping: m})
		}
	}
	exe, err := process.ExecutablePath(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return &aggregate.Process{PID: os.Getpid(), Info: process.Info{ExePath: exe, ExeName: filepath.Base(exe)}, Mappings: exec}
}

// TestResolveOwnFrames resolves frames of this very test binary: a PC at a
// known function, the same address as a return address, and an address in
// no mapping; and checks names, addresses, mappings and counters.
func TestResolveOwnFrames(t *testing.T) {
	proc := ownProcess(t)
	fn := uint64(reflect.ValueOf(probeTarget).Pointer())
	want := runtime.FuncForPC(uintptr(fn)).Name()
	m := proc.Mapping(fn)
	if m == nil {
		t.Fatalf("no executable mapping holds %#x", fn)
	}
	const unmapped = 0x10 // the zero page is never mapped
	inMapping := func(f frame.Frame) frame.Frame { f.Mapping = m; return f }
	batch := &aggregate.Batch{Stacks: []*aggregate.Stack{
		{Process: proc, PID: uint32(proc.PID), TID: 7, Comm: "tester", Count: 3, Timestamps: []uint64{1, 2, 3},
			Frames: []frame.Frame{
				inMapping(frame.AtPC(frame.Native, fn+1)),
				inMapping(frame.AtReturnAddress(frame.Native, fn+1)),
				frame.AtReturnAddress(frame.Native, unmapped),
			}},
		{Process: proc, PID: uint32(proc.PID), TID: 8, Comm: "other", Count: 1,
			Frames: []frame.Frame{inMapping(frame.AtPC(frame.Native, fn+1))}},
	}}

	cache := symbolize.NewBinaryCache(8, 0, symbolize.NewTables(0))
	defer cache.Close()
	r := New(cache, nil)
	procs := r.Resolve(batch)
	stats := r.Stats()

	if len(procs) != 1 || procs[0].PID != int64(proc.PID) || procs[0].ExePath != proc.ExePath || len(procs[0].Samples) != 2 {
		t.Fatalf("want one process with two samples, got %+v", procs)
	}
	s := procs[0].Samples[0]
	if s.Count != 3 || s.ThreadID != 7 || s.ThreadName != "tester" || len(s.Timestamps) != 3 || len(s.Frames) != 3 {
		t.Fatalf("sample %+v", s)
	}
	pc, ret, none := s.Frames[0], s.Frames[1], s.Frames[2]
	for _, f := range []frame.Frame{pc, ret} {
		if f.Name() != want {
			t.Fatalf("frame %#x named %+v, want %s", f.Address, f.Lines, want)
		}
		if f.Type != frame.Go || f.Mapping == nil || f.Mapping.Path != m.Path || f.Mapping.BuildIDGo == "" {
			t.Fatalf("frame %#x: type %q mapping %+v", f.Address, f.Type, f.Mapping)
		}
	}
	// The return address names the call before it: one byte lower.
	if ret.Address != pc.Address-1 {
		t.Fatalf("return address %#x, PC %#x: want PC-1", ret.Address, pc.Address)
	}
	// The process address stays; the ELF virtual address is beside it,
	// as the executable's program headers place the file offset.
	if pc.Address != fn+1 || pc.VirtualAddress != elfVirtualAddress(t, proc.ExePath, fn+1-m.Start+m.Offset) {
		t.Fatalf("PC frame at %#x, virtual address %#x: want %#x and the file's", pc.Address, pc.VirtualAddress, fn+1)
	}
	// An unmapped return address keeps its lookup address.
	if none.Mapping != nil || len(none.Lines) != 0 || none.Address != unmapped-1 || !none.ReturnAddress || none.VirtualAddress != 0 {
		t.Fatalf("unmapped frame %+v", none)
	}
	// Four user frames: three named, one unmapped.
	if stats != (Stats{UserNamed: 3, UserUnmapped: 1}) {
		t.Fatalf("stats %+v", stats)
	}
	// The second sample's PC, the same frame of the same process, was
	// looked up once in the batch, though counted twice above.
	if c := r.NameCacheStats(); c.Len != 2 || c.Misses != 2 || c.Hits != 0 {
		t.Fatalf("name cache %+v, want 2 entries, 2 misses and no hit", c)
	}
	// The next batch names them from the cache.
	r.Resolve(batch)
	if c := r.NameCacheStats(); c.Len != 2 || c.Misses != 2 || c.Hits != 2 {
		t.Fatalf("name cache after a second batch %+v, want 2 entries and 2 hits", c)
	}
	if stats := r.Stats(); stats != (Stats{UserNamed: 6, UserUnmapped: 2}) {
		t.Fatalf("stats after a second batch %+v", stats)
	}
}

// kallsymsAddr returns the address of the kernel text symbol name.
func kallsymsAddr(t *testing.T, name string) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == name && (f[1] == "T" || f[1] == "t") {
			addr, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil || addr == 0 {
				t.Fatalf("kallsyms hides addresses (%q)", line)
			}
			return addr
		}
	}
	t.Fatalf("%s not in /proc/kallsyms", name)
	return 0
}

// TestResolveKernelFrames names kernel frames through the real kernel
// symbolizer. A return address one byte into vfs_read names vfs_read and
// one at its very first byte names the function before it: the address is
// adjusted exactly once. Kernel frames point at the [kernel.kallsyms]
// mapping and carry no source file.
func TestResolveKernelFrames(t *testing.T) {
	testenv.RequireBPF(t)
	start := kallsymsAddr(t, "vfs_read")
	syms, err := kernelsym.New(kernelsym.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer syms.Close()
	batch := &aggregate.Batch{Stacks: []*aggregate.Stack{{PID: 1, TID: 1, Count: 1, Frames: []frame.Frame{
		frame.AtPC(frame.Kernel, start+4),
		frame.AtReturnAddress(frame.Kernel, start+1),
		frame.AtReturnAddress(frame.Kernel, start),
	}}}}
	cache := symbolize.NewBinaryCache(8, 0, symbolize.NewTables(0))
	defer cache.Close()
	r := New(cache, syms)
	procs := r.Resolve(batch)
	if len(procs) != 1 || len(procs[0].Samples) != 1 {
		t.Fatalf("want one sample, got %+v", procs)
	}
	fs := procs[0].Samples[0].Frames
	t.Logf("kernel symbolizer %s: %q %q %q", syms.Path(), fs[0].Name(), fs[1].Name(), fs[2].Name())
	if fs[0].Name() != "vfs_read" || fs[1].Name() != "vfs_read" {
		t.Errorf("PC and return address inside vfs_read named %q and %q", fs[0].Name(), fs[1].Name())
	}
	if n := fs[2].Name(); n == "" || n == "vfs_read" {
		t.Errorf("a return address at vfs_read's first byte named %q, want the function before it", n)
	}
	if fs[1].Address != start || fs[2].Address != start-1 {
		t.Errorf("return addresses looked up at %#x and %#x, want %#x and %#x", fs[1].Address, fs[2].Address, start, start-1)
	}
	for _, f := range fs {
		if f.Type != frame.Kernel || f.Mapping == nil || f.Mapping.Path != "[kernel.kallsyms]" || len(f.Lines) != 1 || f.Lines[0].File != "" {
			t.Errorf("kernel frame %#x: type %s mapping %+v lines %+v", f.Address, f.Type, f.Mapping, f.Lines)
		}
	}
	if s := r.Stats(); s != (Stats{KernelNamed: 3}) {
		t.Errorf("stats %+v, want 3 named kernel frames", s)
	}
}

// TestNameCacheForgetsIdleNames resolves a frame of this test binary, then
// lets nameMaxIdle pass without it: the next batch, of other addresses,
// finds the name gone from the cache, so that names of processes long
// exited do not fill it toward its bound. A name still in use stays.
func TestNameCacheForgetsIdleNames(t *testing.T) {
	proc := ownProcess(t)
	fn := uint64(reflect.ValueOf(probeTarget).Pointer())
	other := uint64(reflect.ValueOf(ownProcess).Pointer())
	m := proc.Mapping(fn)
	if m == nil || proc.Mapping(other) != m {
		t.Fatalf("no one executable mapping holds %#x and %#x", fn, other)
	}
	batchOf := func(addrs ...uint64) *aggregate.Batch {
		var frames []frame.Frame
		for _, a := range addrs {
			f := frame.AtPC(frame.Native, a)
			f.Mapping = m
			frames = append(frames, f)
		}
		return &aggregate.Batch{Stacks: []*aggregate.Stack{{Process: proc, PID: uint32(proc.PID), Count: 1, Frames: frames}}}
	}
	cache := symbolize.NewBinaryCache(8, 0, symbolize.NewTables(0))
	defer cache.Close()
	r := New(cache, nil)
	now := time.Now()
	r.names.SetClock(func() time.Time { return now })

	r.Resolve(batchOf(fn+1, other+1))
	if n := r.NameCacheStats().Len; n != 2 {
		t.Fatalf("%d names cached after naming two addresses, want 2", n)
	}
	now = now.Add(nameMaxIdle / 2)
	r.Resolve(batchOf(other + 1))
	now = now.Add(nameMaxIdle/2 + time.Second) // fn idle longer than nameMaxIdle
	r.Resolve(batchOf(other + 2))
	s := r.NameCacheStats()
	if s.Len != 2 || s.Expired != 1 {
		t.Fatalf("name cache %+v: want the idle name expired and the two in use held", s)
	}
	key := nameKey{offset: m.FileOffset(fn + 1)}
	r.names.RemoveFunc(func(k nameKey, _ named) bool {
		if k.offset == key.offset {
			t.Errorf("the name of %#x, idle for longer than %s, is still cached", fn+1, nameMaxIdle)
		}
		return false
	})
}

// elfVirtualAddress is the virtual address of file offset off in the ELF
// file at path, by its loadable segments.
func elfVirtualAddress(t *testing.T, path string, off uint64) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	t.Fatalf("no loadable segment of %s holds offset %#x", path, off)
	return 0
}
