package cfi

import (
	"debug/elf"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// benchmarkCompile measures FromELF on a real binary and reports the
// table's size: rows, Go bytes and bytes in BPF at 8 bytes a row. The
// table must cover 90% of the file's executable bytes, so a broken
// compiler cannot look fast.
func benchmarkCompile(b *testing.B, path string) {
	if _, err := os.Stat(path); err != nil {
		b.Fatalf("%s is installed by scripts/install-deps.sh --bench: %v", path, err)
	}
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var tbl *Table
	for b.Loop() {
		if tbl, err = FromELF(f); err != nil {
			b.Fatal(err)
		}
	}
	ranges := ExecRanges(f)
	var exec uint64
	for _, r := range ranges {
		exec += r.End - r.Start
	}
	covered := tbl.Covered(ranges)
	if len(tbl.Rows) == 0 || float64(covered) < 0.9*float64(exec) {
		b.Fatalf("%s: %d rows cover %d of %d executable bytes", path, len(tbl.Rows), covered, exec)
	}
	b.ReportMetric(float64(len(tbl.Rows)), "rows")
	b.ReportMetric(float64(tbl.Size()), "table-bytes")
	b.ReportMetric(float64(8*len(tbl.Rows)), "bpf-bytes")
	b.ReportMetric(100*float64(covered)/float64(exec), "%covered")
	b.ReportMetric(float64(peakHeapInuse(b, f)), "peak-heap-bytes")
}

// peakHeapInuse compiles f once more and returns the highest HeapInuse
// seen while it did, above the HeapInuse after a GC before it: what a
// build adds to the process's heap (garbage included, as RSS sees it).
// HeapInuse is sampled every 100µs, so the figure is a lower bound.
func peakHeapInuse(b *testing.B, f *elf.File) uint64 {
	b.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	tbl, err := FromELF(f)
	runtime.ReadMemStats(&ms)
	close(stop)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	runtime.KeepAlive(tbl)
	return max(peak, ms.HeapInuse) - base
}

func BenchmarkCompileLibc(b *testing.B) {
	benchmarkCompile(b, "/lib/x86_64-linux-gnu/libc.so.6")
}

func BenchmarkCompilePython(b *testing.B) {
	benchmarkCompile(b, "/usr/bin/python3.11")
}

// BenchmarkCompileNode compiles a ~100 MB binary.
func BenchmarkCompileNode(b *testing.B) {
	benchmarkCompile(b, "/usr/bin/node")
}
