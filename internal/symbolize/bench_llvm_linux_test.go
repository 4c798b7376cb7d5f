//go:build linux

package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dwarfBatch names addrs through DWARF with the physical function named
// from the symbol table, the path native frames take in Symbolize.
func dwarfBatch(b *Binary, addrs []uint64) int {
	b.loadSymbols()
	b.loadDWARF()
	named := 0
	for _, a := range addrs {
		frames, ok := b.dwarf.lookup(a)
		if f, has := b.elfSyms.lookup(a); has && ok {
			frames[len(frames)-1].Function = f.name
		}
		if ok {
			named++
		}
	}
	return named
}

// BenchmarkVsLLVMSymbolizer names the same 100k addresses of a large
// binary with DWARF and inlines (the ebpfprof receiver test binary) with
// bpfcol and with one llvm-symbolizer process fed on stdin. cold includes
// opening the file and parsing DWARF; warm reuses the parsed tables.
// Reported: the time of one batch each, the ratio, and peak memory.
func BenchmarkVsLLVMSymbolizer(b *testing.B) {
	llvm := llvmSymbolizer(b)
	bin := filepath.Join(workloadDir, "ebpfprofreceiver.test")
	if _, err := os.Stat(bin); err != nil {
		run(b, "", "go", "test", "-c", "-o", bin, "github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver")
	}
	addrs := textAddresses(b, bin, 100000)
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	stdin := in.String()

	var llvmTime time.Duration
	var llvmRSS int64
	b.Run("llvm-symbolizer", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(llvm, "--obj="+bin, "--functions=linkage", "--inlining", "--demangle")
			cmd.Stdin = strings.NewReader(stdin)
			start := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			llvmTime = time.Since(start)
			llvmRSS = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		}
		b.ReportMetric(float64(llvmRSS)/1024, "peak-RSS-MiB")
	})
	var cold time.Duration
	var heap uint64
	b.Run("bpfcol-cold", func(b *testing.B) {
		for b.Loop() {
			start := time.Now()
			f, err := os.Open(bin)
			if err != nil {
				b.Fatal(err)
			}
			bb, err := OpenBinary(f)
			if err != nil {
				b.Fatal(err)
			}
			if dwarfBatch(bb, addrs) == 0 {
				b.Fatal("nothing named")
			}
			cold = time.Since(start)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap = ms.HeapInuse
			bb.Close()
		}
		b.ReportMetric(float64(llvmTime)/float64(cold), "x-faster-than-llvm")
		b.ReportMetric(float64(heap)/(1<<20), "heap-inuse-MiB")
	})
	b.Run("bpfcol-warm", func(b *testing.B) {
		bb := openWorkload(b, bin)
		dwarfBatch(bb, addrs[:1])
		var warm time.Duration
		for b.Loop() {
			start := time.Now()
			dwarfBatch(bb, addrs)
			warm = time.Since(start)
		}
		b.ReportMetric(float64(llvmTime)/float64(warm), "x-faster-than-llvm")
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		b.ReportMetric(float64(ru.Maxrss)/1024, "process-peak-RSS-MiB")
	})
}
