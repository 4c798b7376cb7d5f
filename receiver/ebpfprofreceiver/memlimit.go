package ebpfprofreceiver

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// goMemoryLimiter keeps a soft limit on the Go runtime's memory while a
// receiver runs, unless the operator set one (GOMEMLIMIT). Without it the
// heap grows to twice the live heap before a collection, and pages freed
// after a burst (a large unwind table built, many binaries named at
// start) go back to the kernel only slowly: measured with the four
// workloads of the memory benchmark, the RSS ended at 57-83 MB by
// default and 33-43 MB under a 24 MiB limit, for no measurable CPU.
//
// A fixed limit below what the process holds would have the GC run
// continuously, so the limit follows the live heap: never below twice it
// (plus the runtime's own memory), which is where GOGC=100 collects
// anyway. It only ever brings collections and the return of free pages
// forward.
//
// The limit rises at once with the live heap but falls only once the live
// heap has stayed lower for limiterHold: it follows the highest live heap
// of the last minutes. Under churn the live heap left by a collection
// swings between 12 and 22 MB within a minute (a report's allocations,
// tables parsed and evicted); a limit that followed each dip had the
// scavenger return pages (43 MB in a 4-minute soak) that the heap faulted
// in again seconds later, and VmRSS moved by up to 9 MiB within a minute.
// Held, it moved by at most 2.3 MiB within a minute after the second.
type goMemoryLimiter struct {
	base  int64
	peak  livePeak
	stop  chan struct{}
	done  chan struct{}
	prev  int64 // the limit before start, restored by close
	limit int64 // the limit set now
}

// limiterOwner is the one limiter running in the process: the receivers
// of a collector share it.
var limiterOwner struct {
	sync.Mutex
	active *goMemoryLimiter
	users  int
}

// limiterInterval is how often the limit is checked against the live heap.
const limiterInterval = time.Second

// nonHeapAllowance is what the limit leaves beyond twice the live heap
// for the runtime's own memory: stacks, GC metadata, span structures.
const nonHeapAllowance = 8 << 20

// startGoMemoryLimit starts (or joins) the process's limiter with base as
// its floor. It does nothing when base is 0, the operator set GOMEMLIMIT,
// or something else in the process set a limit. The returned function
// gives it up; the last one restores the limit found.
func startGoMemoryLimit(base int64) (stop func()) {
	if base <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	limiterOwner.Lock()
	defer limiterOwner.Unlock()
	if limiterOwner.active == nil {
		prev := debug.SetMemoryLimit(-1)
		if prev != math.MaxInt64 {
			return func() {} // set by someone else in the process
		}
		l := &goMemoryLimiter{base: base, stop: make(chan struct{}), done: make(chan struct{}), prev: prev}
		l.adjust(time.Now(), readLiveHeap())
		go l.run()
		limiterOwner.active = l
	}
	limiterOwner.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			limiterOwner.Lock()
			defer limiterOwner.Unlock()
			if limiterOwner.users--; limiterOwner.users == 0 {
				l := limiterOwner.active
				limiterOwner.active = nil
				close(l.stop)
				<-l.done
				debug.SetMemoryLimit(l.prev)
			}
		})
	}
}

func (l *goMemoryLimiter) run() {
	defer close(l.done)
	t := time.NewTicker(limiterInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C:
			l.adjust(now, readLiveHeap())
		}
	}
}

// limiterHold is how long the limit stays up for a live heap that has
// dropped: a few report intervals and collections.
const limiterHold = 2 * time.Minute

// readLiveHeap is the heap marked live by the last collection.
func readLiveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(min(s[0].Value.Uint64(), math.MaxInt64/4))
}

// adjust sets the limit for a live heap of live bytes read at now.
func (l *goMemoryLimiter) adjust(now time.Time, live int64) {
	if want := memoryLimitFor(l.base, l.peak.add(now, live)); want != l.limit {
		debug.SetMemoryLimit(want)
		l.limit = want
	}
}

// livePeakSlots divides limiterHold: the peak falls in steps of a quarter
// of it.
const livePeakSlots = 4

// livePeak is the highest live heap seen over the last limiterHold, kept
// as the maxima of livePeakSlots consecutive spans.
type livePeak struct {
	slots [livePeakSlots]int64
	cur   int       // the slot of the span that contains the last reading
	from  time.Time // when that span began
}

// add records a reading of live bytes at now and returns the peak of the
// spans that cover the last limiterHold.
func (p *livePeak) add(now time.Time, live int64) int64 {
	const span = limiterHold / livePeakSlots
	switch {
	case p.from.IsZero() || now.Sub(p.from) >= limiterHold+span || now.Before(p.from):
		// First reading, a long gap, or the clock went back: the old
		// spans say nothing of the heap now.
		p.slots, p.cur, p.from = [livePeakSlots]int64{}, 0, now
	default:
		for now.Sub(p.from) >= span {
			p.cur = (p.cur + 1) % livePeakSlots
			p.slots[p.cur] = 0
			p.from = p.from.Add(span)
		}
	}
	p.slots[p.cur] = max(p.slots[p.cur], live)
	peak := p.slots[0]
	for _, v := range p.slots[1:] {
		peak = max(peak, v)
	}
	return peak
}

// memoryLimitFor is the soft limit for a floor base and a live heap of
// live bytes: base, or enough for the heap to double when it is larger.
func memoryLimitFor(base, live int64) int64 {
	return max(base, 2*live+nonHeapAllowance)
}
