package kernelsym

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// BenchmarkKernelSymbols compares, per batch of kernel addresses, the BPF
// path (program loaded once, cache off so every address goes to the
// kernel) with what reading /proc/kallsyms costs: one full parse plus the
// lookups. bpf-cold adds loading and closing the program to every batch.
// retained-B is the heap a symbolizer holds after one batch.
func BenchmarkKernelSymbols(b *testing.B) {
	testenv.RequireBPF(b)
	ref := loadReference(b)
	for _, n := range []int{1000, 10000} {
		addrs, isReturn := ref.sample(rand.New(rand.NewPCG(5, 6)), n)
		name := fmt.Sprintf("%dk", n/1000)

		b.Run("bpf/"+name, func(b *testing.B) {
			s, err := New(Options{CacheEntries: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if s.Path() != PathBPF {
				b.Fatalf("path %s", s.Path())
			}
			b.ReportAllocs()
			for b.Loop() {
				symbolizeOnce(b, ref, s, addrs, isReturn)
			}
			reportRetained(b, func() any {
				s, err := New(Options{CacheEntries: -1})
				if err != nil {
					b.Fatal(err)
				}
				return symbolizeOnce(b, ref, s, addrs, isReturn)
			})
		})
		b.Run("bpf-cold/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := New(Options{CacheEntries: -1})
				if err != nil {
					b.Fatal(err)
				}
				symbolizeOnce(b, ref, s, addrs, isReturn)
				s.Close()
			}
		})
		b.Run("kallsyms/"+name, func(b *testing.B) {
			fallback := func() *Symbolizer {
				s, err := newSymbolizer(Options{}, func() (formatter, error) { return nil, errBenchNoBPF })
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			b.ReportAllocs()
			for b.Loop() {
				s := fallback()
				symbolizeOnce(b, ref, s, addrs, isReturn)
				s.Close()
			}
			reportRetained(b, func() any { return symbolizeOnce(b, ref, fallback(), addrs, isReturn) })
		})
	}
}

var errBenchNoBPF = errors.New("BPF path disabled by the benchmark")

// symbolizeOnce names addrs with s and fails the benchmark unless every
// answer is the one /proc/kallsyms gives, as the tests require: a batch
// that skipped the kernel (or named wrongly) must not count as work done.
func symbolizeOnce(b *testing.B, ref *reference, s *Symbolizer, addrs []uint64, isReturn []bool) *Symbolizer {
	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		b.Fatal(err)
	}
	if len(got) != len(addrs) {
		b.Fatalf("%d answers for %d addresses", len(got), len(addrs))
	}
	// The check is not part of the work measured.
	b.StopTimer()
	defer b.StartTimer()
	if diffs := ref.compare(addrs, isReturn, got); len(diffs) > 0 {
		b.Fatalf("%d of %d addresses differ from /proc/kallsyms, first: %s", len(diffs), len(addrs), diffs[0])
	}
	return s
}

// reportRetained reports the live heap that the value made by run keeps.
func reportRetained(b *testing.B, run func() any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := run()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "retained-B")
}
