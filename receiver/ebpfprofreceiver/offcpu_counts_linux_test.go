package ebpfprofreceiver

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
)

// roundCounts are what a round of BenchmarkOffCPUOverhead counts, rather
// than times: how the scheduler ran the pipe's two tasks, and what else
// ran beside them. Round times on a VM swing with the pipe's placement
// (a round trip across CPUs wakes a halted vCPU twice, several times the
// cost of one on a single CPU), and counts tell the placement apart where
// times cannot.
type roundCounts struct {
	// The pipe's two tasks (the benchmark's process and the child it
	// forks), from their rusage: CPU time, voluntary and involuntary
	// context switches.
	pipeCPU            time.Duration
	pipeVol, pipeInvol int64
	// Their CPU migrations, as of the last poll before they ended, and
	// the polls that found both running, of those how many on different
	// CPUs.
	migrations   int64
	polls, apart int
	// This process's CPU time and context switches: the receiver's user
	// space, the round's sleeper and the polls.
	selfCPU      time.Duration
	selfSwitches int64
	// Processes the receiver loaded the unwind tables of.
	loads int64
	// All CPUs' busy time (/proc/stat, in 10 ms ticks), and from it what
	// neither the pipe nor this process used.
	busy, foreign time.Duration
	// Interrupts on all CPUs: rescheduling and function call IPIs (a
	// wake-up on another CPU sends one), and IRQ work (BPF's task work
	// scheduling and ringbuf wake-ups raise it).
	ipis, irqWork uint64
	// Context switches of all CPUs (/proc/stat's ctxt), and in
	// modeSwitchCounter those perf's counter counted.
	switches, counted uint64
	// The off-CPU program: sampled switch-outs (short, kept, merged or
	// lost), kept waits recorded, user stack walks in task work.
	sampled, events, walks uint64
}

// systemCounts is what roundCounts takes from the whole system.
type systemCounts struct {
	busyTicks     uint64
	ipis, irqWork uint64
	switches      uint64
}

func readSystemCounts(b *testing.B) systemCounts {
	var s systemCounts
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatalf("reading /proc/stat: %v", err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		b.Fatalf("/proc/stat's first line %q: not the cpu totals", line)
	}
	// user nice system idle iowait irq softirq: all but idle and iowait.
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			b.Fatalf("/proc/stat field %d %q: %v", i, f[i], err)
		}
		s.busyTicks += v
	}
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ctxt "); ok {
			if s.switches, err = strconv.ParseUint(v, 10, 64); err != nil {
				b.Fatalf("/proc/stat's ctxt %q: %v", v, err)
			}
		}
	}
	irqs, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		b.Fatalf("reading /proc/interrupts: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(irqs))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var sum uint64
		for _, x := range f[1:] {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				break // the description after the per-CPU counts
			}
			sum += v
		}
		switch f[0] {
		case "RES:", "CAL:":
			s.ipis += sum
		case "IWI:":
			s.irqWork += sum
		}
	}
	return s
}

// switchCounter is perf's own observer of context switches: the software
// event PERF_COUNT_SW_CONTEXT_SWITCHES, counting (no samples, no BPF) on
// every online CPU. What a round pays for it is what the kernel charges a
// switch for being watched at all, the floor under any BPF program there.
type switchCounter struct {
	fds []int
}

// openSwitchCounter opens the counter, disabled.
func openSwitchCounter(b *testing.B) *switchCounter {
	cpus, err := profiler.OnlineCPUs()
	if err != nil {
		b.Fatal(err)
	}
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES,
		Bits:   unix.PerfBitDisabled,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	c := &switchCounter{}
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			c.close()
			b.Fatalf("opening a context switch counter on cpu %d: %v", cpu, err)
		}
		c.fds = append(c.fds, fd)
	}
	return c
}

// set enables (PERF_EVENT_IOC_ENABLE) or disables the counter on every
// CPU.
func (c *switchCounter) set(b *testing.B, req uint) {
	for _, fd := range c.fds {
		if err := unix.IoctlSetInt(fd, req, 0); err != nil {
			b.Fatalf("switching a context switch counter on or off: %v", err)
		}
	}
}

// count is the switches counted on all CPUs while it was enabled.
func (c *switchCounter) count(b *testing.B) uint64 {
	var sum uint64
	var buf [8]byte
	for _, fd := range c.fds {
		if n, err := unix.Read(fd, buf[:]); err != nil || n != len(buf) {
			b.Fatalf("reading a context switch counter: %d bytes, %v", n, err)
		}
		sum += binary.NativeEndian.Uint64(buf[:])
	}
	return sum
}

func (c *switchCounter) close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// selfUsage is this process's CPU time and context switches.
func selfUsage(b *testing.B) (time.Duration, int64) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("reading own resource usage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// usageOf is a reaped process's rusage, with its reaped children's:
// CPU time, voluntary and involuntary context switches.
func usageOf(ps *os.ProcessState) (time.Duration, int64, int64) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw, ru.Nivcsw
}

// placement is what polling the pipe's tasks saw.
type placement struct {
	polls, apart int
	migrations   map[int]int64 // by task, the last count read
}

// pollPlacement reads, every 20 ms until stop is closed, the CPU of pid
// and of its first child, and their migration counts.
func pollPlacement(pid int, stop <-chan struct{}) placement {
	pl := placement{migrations: map[int]int64{}}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return pl
		case <-t.C:
		}
		kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(kids))
		if len(f) == 0 {
			continue
		}
		child, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		cpuA, okA := taskCPU(pid)
		cpuB, okB := taskCPU(child)
		if !okA || !okB {
			continue
		}
		pl.polls++
		if cpuA != cpuB {
			pl.apart++
		}
		for _, p := range []int{pid, child} {
			if m, ok := taskMigrations(p); ok {
				pl.migrations[p] = m
			}
		}
	}
}

// taskCPU is the CPU pid last ran on, field 39 of /proc/PID/stat.
func taskCPU(pid int) (int, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields from the 3rd on follow the last ')': the name may hold any.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 37 {
		return 0, false
	}
	cpu, err := strconv.Atoi(f[36])
	return cpu, err == nil
}

// taskMigrations is se.nr_migrations of /proc/PID/sched.
func taskMigrations(pid int) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/sched", pid))
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "se.nr_migrations" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// spearman is the rank correlation of xs and ys (ties share their mean
// rank); NaN with fewer than 3 pairs or a constant series.
func spearman(xs, ys []float64) float64 {
	if len(xs) != len(ys) || len(xs) < 3 {
		return math.NaN()
	}
	return pearson(ranks(xs), ranks(ys))
}

func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(xs[a], xs[b]) })
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			r[idx[k]] = float64(i+j)/2 + 1
		}
		i = j + 1
	}
	return r
}

func pearson(xs, ys []float64) float64 {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

func TestSpearman(t *testing.T) {
	// Any increasing function of xs ranks alike: 1; reversed: -1.
	xs := []float64{3, 1, 4, 1.5, 9, 2.6}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = math.Exp(x)
	}
	if r := spearman(xs, ys); math.Abs(r-1) > 1e-12 {
		t.Errorf("spearman of xs and exp(xs) = %v, want 1", r)
	}
	for i := range ys {
		ys[i] = -ys[i]
	}
	if r := spearman(xs, ys); math.Abs(r+1) > 1e-12 {
		t.Errorf("spearman of xs and -exp(xs) = %v, want -1", r)
	}
	// Ties share their mean rank.
	if got := ranks([]float64{5, 1, 5, 2}); !slices.Equal(got, []float64{3.5, 1, 3.5, 2}) {
		t.Errorf("ranks of 5 1 5 2 = %v, want 3.5 1 3.5 2", got)
	}
	// A constant series, or too few pairs: no correlation.
	if r := spearman([]float64{1, 2, 3}, []float64{7, 7, 7}); !math.IsNaN(r) {
		t.Errorf("spearman with a constant series = %v, want NaN", r)
	}
	if r := spearman([]float64{1, 2}, []float64{1, 2}); !math.IsNaN(r) {
		t.Errorf("spearman of 2 pairs = %v, want NaN", r)
	}
}
