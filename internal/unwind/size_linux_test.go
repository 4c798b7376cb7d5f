//go:build linux

package unwind

import (
	"debug/elf"
	"runtime"
	"testing"
)

// TestFunctionSizeAccountsForTheHeap analyses the functions of libc, each
// from its own copy of its code as the leaf analysis reads it, and checks
// Size, which bounds the receiver's cache of analyses, against the heap
// they hold: within a factor of two.
func TestFunctionSizeAccountsForTheHeap(t *testing.T) {
	const lib = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatalf("opening %s: %v", lib, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	var fns []*Function
	var size int64
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value < text.Addr || s.Value+s.Size > text.Addr+text.Size {
			continue
		}
		code := append([]byte(nil), data[s.Value-text.Addr:s.Value-text.Addr+s.Size]...)
		fn := Analyze(code, s.Value)
		fns = append(fns, fn)
		size += fn.Size()
	}
	grown := heap() - before
	t.Logf("%d functions: Size sums to %d bytes, the heap grew %d", len(fns), size, grown)
	if len(fns) < 1000 {
		t.Fatalf("only %d functions analysed from %s", len(fns), lib)
	}
	if size < grown/2 || size > grown*2 {
		t.Errorf("Size sums to %d bytes for %d bytes of heap: off by more than 2x", size, grown)
	}
	runtime.KeepAlive(fns)
	runtime.KeepAlive(data)
}
