package uproberecv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestProbesOnMuslAndStatic probes a program's own function and libc's
// getppid in builds against musl (dynamic: getppid in musl's libc.so,
// found by file_match; static: in the executable) and static glibc, with
// exit: return: every call of every run is recorded, with the process's
// executable.
func TestProbesOnMuslAndStatic(t *testing.T) {
	const muslLibc = "/usr/lib/x86_64-linux-musl/libc.so"
	builds := []struct {
		name, bin, libc string // libc: the file holding getppid
	}{
		{"musl", testworkload.BuildMusl(t, "libccalls.c", "-O2", "-g"), muslLibc},
		{"musl static", testworkload.BuildMusl(t, "libccalls.c", "-O2", "-g", "-static"), ""},
		{"glibc static", testworkload.BuildC(t, "libccalls.c", "-O2", "-g", "-static"), ""},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			lib := ProbeConfig{ID: "ppid", Binary: b.bin, Entry: "getppid", Exit: "return"}
			if b.libc != "" {
				lib.Binary, lib.FileMatch = "", `x86_64-linux-musl/libc\.so$`
			}
			cfg := &Config{
				Probes: []ProbeConfig{{ID: "own", Binary: b.bin, Entry: "short_call", Exit: "return"}, lib},
				Retain: RetainConfig{MaxBinaries: 16, MaxAge: time.Hour},
			}
			r, sink := startReceiver(t, cfg, options{})
			if b.libc != "" {
				// musl's libc, attached when a process maps it: one that
				// lives until then (a process gone before its mappings
				// are read attaches nothing, and is counted).
				cmd := testworkload.Start(t, b.bin, "2000000000")
				key := keyOf(t, b.libc)
				if !waitFor(10*time.Second, func() bool { return r.tracker.isAttached(key) }) {
					t.Fatalf("%s was not attached", b.libc)
				}
				_ = cmd.Process.Kill()
			}
			const runs, calls = 10, 20
			var pids []int64
			for range runs {
				cmd := exec.Command(b.bin, strconv.Itoa(calls))
				out, err := cmd.Output()
				if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("calls %d", calls) {
					t.Fatalf("run: %q, %v", out, err)
				}
				pids = append(pids, int64(cmd.Process.Pid))
			}
			count := func(probe string) (n int) {
				by := recordsByPID(flatten(sink), probe)
				for _, pid := range pids {
					n += len(by[pid])
				}
				return n
			}
			waitFor(10*time.Second, func() bool { return count("own") >= runs*calls && count("ppid") >= runs*calls })
			for _, probe := range []string{"own", "ppid"} {
				by := recordsByPID(flatten(sink), probe)
				for i, pid := range pids {
					if len(by[pid]) != calls {
						t.Errorf("%s: run %d (pid %d): %d records, want %d", probe, i, pid, len(by[pid]), calls)
					}
					for _, l := range by[pid] {
						if l.exePath != b.bin || l.exeName != filepath.Base(b.bin) || l.nested != 0 {
							t.Fatalf("%s: run %d: record %+v", probe, i, l)
						}
					}
				}
			}
			c, _ := r.probes.Counters()
			t.Logf("%d runs of %d calls: %d and %d records; counters %+v", runs, calls, count("own"), count("ppid"), c)
		})
	}
}
