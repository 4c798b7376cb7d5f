package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// cpuStat is the first line of /proc/stat summed over all CPUs, in clock
// ticks, and the number of CPUs it sums.
type cpuStat struct {
	busy int64 // user, nice, system, irq, softirq: what the sampler sees
	cpus int
}

func readCPUStat(tb testing.TB) cpuStat {
	tb.Helper()
	f, err := os.Open("/proc/stat")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var st cpuStat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 7 && fields[0] == "cpu":
			// user nice system idle iowait irq softirq steal ...: idle and
			// iowait run the idle task, whose samples are not recorded;
			// steal is time the vCPU did not run, so no timer fired.
			for _, i := range []int{1, 2, 3, 6, 7} {
				v, err := strconv.ParseInt(fields[i], 10, 64)
				if err != nil {
					tb.Fatalf("parsing /proc/stat line %q: %v", sc.Text(), err)
				}
				st.busy += v
			}
		case strings.HasPrefix(fields[0], "cpu"):
			st.cpus++
		}
	}
	if st.cpus == 0 {
		tb.Fatal("/proc/stat lists no CPU")
	}
	return st
}

// interval is one report interval of the collector, as its profiles say.
type interval struct{ start, end time.Time }

// exportedSamples sums the sample counts of the profiles received whose
// report interval lies within [from, to], and returns those intervals and
// the latest end of any interval received.
func exportedSamples(received []pprofile.Profiles, from, to time.Time) (samples int64, intervals []interval, latest time.Time) {
	seen := map[interval]bool{}
	for _, p := range received {
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			sps := p.ResourceProfiles().At(i).ScopeProfiles()
			for j := 0; j < sps.Len(); j++ {
				profs := sps.At(j).Profiles()
				for k := 0; k < profs.Len(); k++ {
					prof := profs.At(k)
					iv := interval{prof.Time().AsTime(), prof.Time().AsTime().Add(time.Duration(prof.DurationNano()))}
					if iv.end.After(latest) {
						latest = iv.end
					}
					if iv.start.Before(from) || iv.end.After(to) {
						continue
					}
					if !seen[iv] {
						seen[iv] = true
						intervals = append(intervals, iv)
					}
					ss := prof.Samples()
					for s := 0; s < ss.Len(); s++ {
						// The OTel eBPF profiler sends CPU samples with
						// timestamps and no value.
						if v := ss.At(s).Values(); v.Len() > 0 {
							samples += v.At(0)
						} else {
							samples += int64(ss.At(s).TimestampsUnixNano().Len())
						}
					}
				}
			}
		}
	}
	return samples, intervals, latest
}

// checkExported fails b unless the collector exported, for the report
// intervals inside the window [from, to], the samples a sampler at hz
// takes of the CPU time the host was busy then (/proc/stat before and
// after). The bound is derived, not a tolerance picked by hand: busy time
// outside the exported intervals can hold at most cpus × (window −
// covered) of it, and each interval boundary can cut one sample period per
// CPU. It returns the samples exported and the share of the expected
// count.
func checkExported(b *testing.B, s *profilesServer, hz int, from, to time.Time, before, after cpuStat, reportInterval time.Duration) (int64, float64) {
	b.Helper()
	// Wait for the report holding the window's end, which arrives about
	// one interval after it; the exporter may send reports out of order,
	// so give the others one more interval.
	deadline := to.Add(3*reportInterval + 10*time.Second)
	for {
		_, _, latest := exportedSamples(s.all(), from, to)
		if !latest.Before(to.Add(reportInterval)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	samples, intervals, _ := exportedSamples(s.all(), from, to)
	window := to.Sub(from)
	var covered time.Duration
	for _, iv := range intervals {
		covered += iv.end.Sub(iv.start)
	}
	// Reports are contiguous: those inside the window cover all of it but
	// part of one interval at each end. A dropped report shows here.
	if covered == 0 || covered < window-2*reportInterval {
		b.Fatalf("the exported report intervals inside the %s window cover only %s: %s", window, covered, fmtIntervals(intervals))
	}
	cpus := float64(after.cpus)
	busy := float64(after.busy-before.busy) / clockTicksPerSecond
	// CPU-seconds busy inside the exported intervals, at least.
	busyCovered := busy - cpus*(window-covered).Seconds()
	// One sample period per CPU at each interval edge, and one clock tick
	// per CPU of /proc/stat's resolution.
	slack := 2*cpus*float64(len(intervals)) + cpus*float64(hz)/clockTicksPerSecond
	want := float64(hz)*busyCovered - slack
	b.Logf("exported %d samples in %d intervals covering %s of the %s window; host busy %.1f CPU-s (%.1f CPU-s at least in the intervals): want at least %.0f",
		samples, len(intervals), covered.Round(time.Millisecond), window, busy, busyCovered, want)
	// The window must have been busy enough for the check to mean
	// something: the workloads keep every CPU loaded.
	if busyCovered < cpus*covered.Seconds()/2 {
		b.Fatalf("the host was busy only %.1f CPU-s of the %s covered on %d CPUs: the workloads did not run", busyCovered, covered, after.cpus)
	}
	if float64(samples) < want {
		b.Fatalf("the collector exported %d samples for the window, want at least %.0f (%d Hz × %.1f busy CPU-s − %.0f)",
			samples, want, hz, busyCovered, slack)
	}
	return samples, float64(samples) / (float64(hz) * busyCovered)
}

// fmtIntervals is for failure messages.
func fmtIntervals(ivs []interval) string {
	var parts []string
	for _, iv := range ivs {
		parts = append(parts, fmt.Sprintf("%s+%s", iv.start.Format("15:04:05.000"), iv.end.Sub(iv.start)))
	}
	return strings.Join(parts, ", ")
}
