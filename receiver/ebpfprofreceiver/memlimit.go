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
type goMemoryLimiter struct {
	base  int64
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
		l.adjust()
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
		case <-t.C:
			l.adjust()
		}
	}
}

// adjust sets the limit for the live heap now.
func (l *goMemoryLimiter) adjust() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var live int64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = int64(min(s[0].Value.Uint64(), math.MaxInt64/4))
	}
	if want := memoryLimitFor(l.base, live); want != l.limit {
		debug.SetMemoryLimit(want)
		l.limit = want
	}
}

// memoryLimitFor is the soft limit for a floor base and a live heap of
// live bytes: base, or enough for the heap to double when it is larger.
func memoryLimitFor(base, live int64) int64 {
	return max(base, 2*live+nonHeapAllowance)
}
