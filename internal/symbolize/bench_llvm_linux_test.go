//go:build linux

package symbolize

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/frame"
)

// dwarfBatch names addrs through DWARF with the physical function named
// from the symbol table, the path native frames take in Symbolize, and
// stores each answer in out (nil where nothing covers the address).
func dwarfBatch(b *Binary, addrs []uint64, out [][]frame.Line) {
	b.loadSymbols()
	b.loadDWARF()
	for i, a := range addrs {
		frames, ok := b.dwarf.Lookup(a)
		if f, has := b.elfSyms.lookup(a); has && ok {
			frames[len(frames)-1].Name = f.Name
		}
		out[i] = frames
	}
}

// parseLLVMSymbolizer reads llvm-symbolizer's answers to n addresses (one
// block of function and file:line:column lines per address, inlined frames
// first) into frames per address, with "??" as empty fields; nil where it
// named nothing.
func parseLLVMSymbolizer(out string, n int) ([][]frame.Line, error) {
	blocks := strings.Split(strings.TrimRight(out, "\n"), "\n\n")
	if len(blocks) != n {
		return nil, fmt.Errorf("llvm-symbolizer answered %d blocks for %d addresses", len(blocks), n)
	}
	res := make([][]frame.Line, n)
	for i, b := range blocks {
		lines := strings.Split(b, "\n")
		if len(lines)%2 != 0 {
			return nil, fmt.Errorf("llvm-symbolizer block %d has an odd number of lines: %q", i, b)
		}
		for j := 0; j < len(lines); j += 2 {
			fr := frame.Line{Name: lines[j]}
			if fr.Name == "??" {
				fr.Name = ""
			}
			pos := lines[j+1] // file:line:column
			if k := strings.LastIndexByte(pos, ':'); k >= 0 {
				pos = pos[:k]
				if k := strings.LastIndexByte(pos, ':'); k >= 0 {
					fr.File = pos[:k]
					fr.Line, _ = strconv.ParseInt(pos[k+1:], 10, 64)
				}
			}
			if fr.File == "??" {
				fr.File = ""
			}
			res[i] = append(res[i], fr)
		}
		if len(res[i]) == 1 && res[i][0] == (frame.Line{}) {
			res[i] = nil
		}
	}
	return res, nil
}

// checkBatch fails b unless at least 99.9% of got are identical to
// llvm-symbolizer's answers want (the accuracy tests' rule), and returns
// the share that differ.
func checkBatch(b *testing.B, run string, addrs []uint64, got, want [][]frame.Line) float64 {
	b.Helper()
	misses, first := 0, ""
	for i := range addrs {
		if !framesEqual(got[i], want[i]) {
			if misses == 0 {
				first = fmt.Sprintf("%#x: %s", addrs[i], framesDiff(got[i], want[i]))
			}
			misses++
		}
	}
	share := float64(misses) / float64(len(addrs))
	if share > 0.001 {
		b.Fatalf("%s: %d of %d addresses differ from llvm-symbolizer (%.3f%%, bound 0.1%%), first: %s",
			run, misses, len(addrs), 100*share, first)
	}
	return share
}

// BenchmarkVsLLVMSymbolizer names the same 100k addresses of a large
// binary with DWARF and inlines (the ebpfprof receiver test binary) with
// one llvm-symbolizer process fed on stdin, then with bpfcol cold (opening
// the file and parsing DWARF included), then warm (the same Binary again,
// tables parsed). All three run in every iteration, so each ratio compares
// times taken in the same run. Each answer is checked against
// llvm-symbolizer's own output of that iteration: a batch that named
// nothing, or wrongly, fails instead of looking fast. ns/op is the three
// batches together; the metrics split them.
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
	cold, warm := make([][]frame.Line, len(addrs)), make([][]frame.Line, len(addrs))
	// llvm-symbolizer's answers go to a file, not this heap, which
	// heap-inuse-MiB measures.
	answers := filepath.Join(workloadDir, "llvm-symbolizer.out")

	var llvmTime, coldTime, warmTime time.Duration
	var llvmRSS int64
	var heap uint64
	var coldMiss, warmMiss float64
	for b.Loop() {
		cmd := exec.Command(llvm, "--obj="+bin, "--functions=linkage", "--inlining", "--demangle")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := os.Create(answers)
		if err != nil {
			b.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = out, &stderr
		start := time.Now()
		err = cmd.Run()
		llvmTime += time.Since(start)
		out.Close()
		if err != nil {
			b.Fatalf("llvm-symbolizer: %v\n%s", err, stderr.String())
		}
		llvmRSS = max(llvmRSS, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)

		start = time.Now()
		f, err := os.Open(bin)
		if err != nil {
			b.Fatal(err)
		}
		bb, err := OpenBinary(f, NewTables(0))
		if err != nil {
			b.Fatal(err)
		}
		dwarfBatch(bb, addrs, cold)
		coldTime += time.Since(start)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapInuse)

		start = time.Now()
		dwarfBatch(bb, addrs, warm)
		warmTime += time.Since(start)
		bb.Close()

		b.StopTimer()
		text, err := os.ReadFile(answers)
		if err != nil {
			b.Fatal(err)
		}
		want, err := parseLLVMSymbolizer(string(text), len(addrs))
		if err != nil {
			b.Fatal(err)
		}
		named := 0
		for _, w := range want {
			if len(w) > 0 {
				named++
			}
		}
		// The reference itself must have done the work.
		if named < len(addrs)*9/10 {
			b.Fatalf("llvm-symbolizer named only %d of %d addresses", named, len(addrs))
		}
		coldMiss = max(coldMiss, checkBatch(b, "cold", addrs, cold, want))
		warmMiss = max(warmMiss, checkBatch(b, "warm", addrs, warm, want))
		clear(cold)
		clear(warm)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(llvmTime.Milliseconds())/n, "llvm-ms")
	b.ReportMetric(float64(coldTime.Milliseconds())/n, "cold-ms")
	b.ReportMetric(float64(warmTime.Milliseconds())/n, "warm-ms")
	b.ReportMetric(float64(llvmTime)/float64(coldTime), "cold-x-faster-than-llvm")
	b.ReportMetric(float64(llvmTime)/float64(warmTime), "warm-x-faster-than-llvm")
	b.ReportMetric(100*coldMiss, "cold-miss-%")
	b.ReportMetric(100*warmMiss, "warm-miss-%")
	b.ReportMetric(float64(llvmRSS)/1024, "llvm-peak-RSS-MiB")
	// Heap in use after the cold batch, its answers included.
	b.ReportMetric(float64(heap)/(1<<20), "heap-inuse-MiB")
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "process-peak-RSS-MiB")
}
