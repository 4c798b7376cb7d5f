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
				symbolizeOnce(b, s, addrs, isReturn)
			}
			reportRetained(b, func() any {
				s, err := New(Options{CacheEntries: -1})
				if err != nil {
					b.Fatal(err)
				}
				return symbolizeOnce(b, s, addrs, isReturn)
			})
		})
		b.Run("bpf-cold/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := New(Options{CacheEntries: -1})
				if err != nil {
					b.Fatal(err)
				}
				symbolizeOnce(b, s, addrs, isReturn)
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
				symbolizeOnce(b, s, addrs, isReturn)
				s.Close()
			}
			reportRetained(b, func() any { return symbolizeOnce(b, fallback(), addrs, isReturn) })
		})
	}
}

var errBenchNoBPF = errors.New("BPF path disabled by the benchmark")

func symbolizeOnce(b *testing.B, s *Symbolizer, addrs []uint64, isReturn []bool) *Symbolizer {
	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		b.Fatal(err)
	}
	if !got[0].OK && !got[1].OK {
		b.Fatalf("nothing resolved: %+v", got[:2])
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
