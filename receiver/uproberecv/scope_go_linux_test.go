package uproberecv

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

const (
	goGoroutines = 16
	goCalls      = 12
)

// goOutput parses goscope's lines.
func goOutput(t *testing.T, lines []string) (durations []int64, depths map[int64]int, migrations, slowestCal int64) {
	depths = map[int64]int{}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "call "):
			f := fields(t, l, 3)
			durations = append(durations, f[2])
			depths[f[1]]++
		case strings.HasPrefix(l, "migrations "):
			migrations = fields(t, l, 1)[0]
		case strings.HasPrefix(l, "calibration "):
			slowestCal = fields(t, l, 2)[1]
		}
	}
	return durations, depths, migrations, slowestCal
}

// TestGoWorkloadScopes probes a Go function called by many goroutines that
// park and migrate between threads (and grow their stacks inside it):
// exit on RET instructions, scopes keyed by goroutine. The program must
// survive, counts match exactly and durations agree, stripped or not.
func TestGoWorkloadScopes(t *testing.T) {
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"symbols", nil},
		{"stripped", []string{"-ldflags=-s -w"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			bin := testworkload.BuildGo(t, "goscope", build.flags...)
			start, out := tempPaths(t)
			touch(t, start)
			testworkload.Start(t, bin, start, out, "0", "0", "200")
			_, _, _, baseline := goOutput(t, readOutput(t, out, 30*time.Second))

			cfg := &Config{Probes: []ProbeConfig{
				{ID: "block", FileMatch: "/goscope$", Entry: "main.blockingScope", Exit: "return"},
				{ID: "cost", FileMatch: "/goscope$", Entry: "main.probeCost", Exit: "return", MinDuration: time.Hour},
			}}
			r, sink := startReceiver(t, cfg, options{})
			start, out = tempPaths(t)
			cmd := testworkload.Start(t, bin, start, out, fmt.Sprint(goGoroutines), fmt.Sprint(goCalls), "200")
			key := keyOf(t, bin)
			if !waitFor(time.Second, func() bool { _, h := r.tracker.attachedCount(key); return h == 1 }) {
				t.Fatal("Go workload not probed within 1s")
			}
			touch(t, start)
			durations, depths, migrations, slowest := goOutput(t, readOutput(t, out, 60*time.Second))
			if err := cmd.Wait(); err != nil {
				t.Fatalf("Go workload crashed under the probes: %v", err)
			}
			want := goGoroutines * goCalls
			if len(durations) != want {
				t.Fatalf("workload logged %d calls, want %d", len(durations), want)
			}
			t.Logf("%d calls, %d migrated threads, depths %v", want, migrations, depths)
			if migrations == 0 {
				t.Errorf("no call migrated between threads: the test proves nothing about goroutine keys")
			}
			trapCost := time.Duration(max(slowest-baseline, 0))

			var logs []scopeLog
			waitFor(5*time.Second, func() bool {
				logs = logs[:0]
				for _, l := range flatten(sink) {
					if l.probe == "block" {
						logs = append(logs, l)
					}
				}
				return len(logs) >= want
			})
			if len(logs) != want {
				t.Fatalf("%d records for %d outermost calls", len(logs), want)
			}
			nested := map[int64]int{}
			got := make([]int64, len(logs))
			for i, l := range logs {
				got[i] = l.durationNs
				nested[l.nested]++
			}
			for d, n := range depths {
				if nested[d] != n {
					t.Errorf("%d calls of depth %d, %d records with %d nested calls", n, d, nested[d], d)
				}
			}
			// Goroutines' calls interleave, so compare sorted durations: if a
			// one-for-one pairing within tolerance exists, the sorted pairing
			// is one.
			sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			// A goroutine's own clock also counts the time it waited for a P
			// after the function returned, so each call may run long by the
			// scheduler's latency; the typical (median) call must agree
			// within max(1%, trap cost), and none may be shorter than BPF saw.
			diffs := make([]time.Duration, len(got))
			for i := range got {
				own, bpf := time.Duration(durations[i]), time.Duration(got[i])
				diffs[i] = own - bpf
				tol := max(own/100, trapCost)
				if diffs[i] < -tol || diffs[i] > max(own/10, time.Millisecond) {
					t.Errorf("call of %s by its own clock paired with a record of %s", own, bpf)
				}
			}
			sort.Slice(diffs, func(i, j int) bool { return diffs[i] < diffs[j] })
			median, worst := diffs[len(diffs)/2], diffs[len(diffs)-1]
			if median > max(trapCost, time.Duration(durations[len(durations)/2])/100) {
				t.Errorf("median difference %s over max(1%%, trap cost %s)", median, trapCost)
			}
			c, err := r.probes.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("trap cost %s; median difference %s, worst %s; counters %+v", trapCost, median, worst, c)
			if c.LostRingbuf != 0 || c.ExitWithoutEntry != 0 {
				t.Errorf("lost %d, exits without entry %d", c.LostRingbuf, c.ExitWithoutEntry)
			}
		})
	}
}
