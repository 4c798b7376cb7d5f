package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/symbolize/dwarfsym"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// BenchmarkColdLibcDebug measures what naming the first address of a
// process in libc costs a collector that just started: libc6-dbg's debug
// file opened, its compressed DWARF read and indexed, one unit parsed.
// "cold" starts with an empty cache directory, so the sections are
// decompressed (by prefix: the front of them); "kept" with the one an
// earlier run that decompressed them whole left, as a restart on the same
// host does, and fails unless the sections were reused from it.
// The name must match the symbol table's.
func BenchmarkColdLibcDebug(b *testing.B) {
	dbg, syms := symtest.LibcDebugFile(b)
	var addr uint64
	const want = "__libc_start_call_main"
	for _, s := range syms {
		if s.Name == want && s.Value != 0 {
			addr = s.Value + 8
		}
	}
	if addr == 0 {
		b.Fatalf("%s: no %s", dbg, want)
	}
	name := func(b *testing.B, dir string) SpillStats {
		tables := NewTables(DefaultMaxTableBytes)
		_, stop := spillTo(b, tables, dir, DefaultMaxSpillBytes)
		defer stop()
		f, err := os.Open(dbg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		bin, err := OpenBinary(f, tables)
		if err != nil {
			b.Fatal(err)
		}
		frames, ok := bin.Symbolize(addr)
		if !ok || frames[len(frames)-1].Name != want {
			b.Fatalf("%#x named %v, want %s", addr, frames, want)
		}
		bin.Close()
		b.StopTimer()
		return tables.spillStats()
	}
	b.Run("cold", func(b *testing.B) {
		b.StopTimer()
		for range b.N {
			if st := name(b, filepath.Join(b.TempDir(), "cache")); st.Sections == 0 || st.Reused != 0 {
				b.Fatalf("spill stats %+v: want sections decompressed, none reused", st)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		b.StopTimer()
		// A start that read libc's DWARF whole (its lookups went past
		// what a prefix answers) left every section kept.
		dwarfsym.ReadByPrefix.Store(false)
		name(b, dir)
		dwarfsym.ReadByPrefix.Store(true)
		for range b.N {
			if st := name(b, dir); st.Reused == 0 || st.Reused != st.Sections {
				b.Fatalf("spill stats %+v: want every section reused", st)
			}
		}
	})
}

// BenchmarkFirstLibcReport measures, in one run, the CPU time (user and
// system, of the whole process: the parallel decompression counts) and
// the heap allocated to name what a first report holds in libc, from
// libc6-dbg, "first" with an empty cache directory, "restart" with the
// sections an earlier run kept: its DWARF indexed whole, as before
// prefixes, and by prefix. "start" names the start-up frames of a process
// (what the frame-pointer benchmark's workloads show), "syscalls" adds
// wrappers from the middle and end of libc. Every name must match the
// symbol table's, a restart must decompress nothing; the ratio is prefix
// over whole.
func BenchmarkFirstLibcReport(b *testing.B) {
	dbg, syms := symtest.LibcDebugFile(b)
	sets := map[string][]string{
		"start":    {"__libc_start_call_main", "__libc_start_main_impl"},
		"syscalls": {"__libc_start_call_main", "__libc_start_main_impl", "__clock_nanosleep", "__libc_read", "__libc_write", "__poll"},
	}
	for _, set := range []string{"start", "syscalls"} {
		// The names of each address: the symbols at its function's
		// start, any of which the symbol table may give it.
		var addrs []uint64
		var names [][]string
		for _, name := range sets[set] {
			for _, s := range syms {
				if s.Name == name && s.Value != 0 && s.Size > 8 {
					addrs = append(addrs, s.Value+8)
					var aliases []string
					for _, o := range syms {
						if o.Value == s.Value && elf.ST_TYPE(o.Info) == elf.STT_FUNC {
							aliases = append(aliases, o.Name)
						}
					}
					names = append(names, aliases)
					break
				}
			}
		}
		if len(addrs) != len(sets[set]) {
			b.Fatalf("%s: not every one of %v in the symbol table", dbg, sets[set])
		}
		// dir "" starts with an empty cache directory (a first start);
		// else with dir, which a run that read libc's DWARF whole left
		// (a restart).
		run := func(b *testing.B, prefix bool, dir string) (cpu time.Duration, alloc uint64, inflated int64) {
			dwarfsym.ReadByPrefix.Store(prefix)
			defer dwarfsym.ReadByPrefix.Store(true)
			if dir == "" {
				dir = filepath.Join(b.TempDir(), "cache")
			}
			tables := NewTables(DefaultMaxTableBytes)
			_, stop := spillTo(b, tables, dir, DefaultMaxSpillBytes)
			defer stop()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := processCPU(b)
			f, err := os.Open(dbg)
			if err != nil {
				b.Fatal(err)
			}
			bin, err := OpenBinary(f, tables)
			if err != nil {
				b.Fatal(err)
			}
			for i, a := range addrs {
				frames, ok := bin.Symbolize(a)
				if !ok || !slices.ContainsFunc(names[i], func(n string) bool {
					return strings.Split(n, "@")[0] == strings.Split(frames[len(frames)-1].Name, "@")[0]
				}) {
					b.Fatalf("%#x named %v, want one of %v", a, frames, names[i])
				}
			}
			bin.Close()
			cpu = processCPU(b) - cpu0
			runtime.ReadMemStats(&ms1)
			st := tables.spillStats()
			if st.Reused != 0 && st.Reused != st.Sections {
				b.Fatalf("spill stats %+v: some sections kept, not all reused", st)
			}
			return cpu, ms1.TotalAlloc - ms0.TotalAlloc, st.Inflated
		}
		for _, start := range []string{"first", "restart"} {
			b.Run(set+"/"+start, func(b *testing.B) {
				dir := ""
				if start == "restart" {
					dir = filepath.Join(b.TempDir(), "kept")
					run(b, false, dir)
				}
				var whole, byPrefix time.Duration
				var wholeAlloc, prefixAlloc uint64
				var wholeInfl, prefixInfl int64
				for b.Loop() {
					runtime.GC()
					c, a, n := run(b, false, dir)
					whole, wholeAlloc, wholeInfl = whole+c, wholeAlloc+a, n
					runtime.GC()
					c, a, n = run(b, true, dir)
					byPrefix, prefixAlloc, prefixInfl = byPrefix+c, prefixAlloc+a, n
				}
				if start == "first" && (prefixInfl == 0 || wholeInfl == 0) || start == "restart" && (prefixInfl != 0 || wholeInfl != 0) {
					b.Fatalf("decompressed %d bytes whole, %d by prefix: want some in both at a first start, none at a restart", wholeInfl, prefixInfl)
				}
				n := float64(b.N)
				b.ReportMetric(float64(whole.Microseconds())/1000/n, "whole_cpu_ms/op")
				b.ReportMetric(float64(byPrefix.Microseconds())/1000/n, "prefix_cpu_ms/op")
				b.ReportMetric(float64(byPrefix)/float64(whole), "prefix/whole_cpu")
				b.ReportMetric(float64(wholeAlloc)/n, "whole_B/op")
				b.ReportMetric(float64(prefixAlloc)/n, "prefix_B/op")
				b.ReportMetric(float64(wholeInfl), "whole_inflated_B")
				b.ReportMetric(float64(prefixInfl), "prefix_inflated_B")
			})
		}
	}
}

// processCPU returns the user and system CPU time of the process so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
