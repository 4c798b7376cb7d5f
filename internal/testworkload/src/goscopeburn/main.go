//go:build linux

// goscopeburn runs goroutines that burn CPU inside a //go:noinline function
// and yield and park in it, so they migrate between threads while its
// scope is open: for linking profile samples to scopes keyed by goroutine.
// Each goroutine enters the function through a caller of its own
// (main.worker0 ... main.worker3), so a sample's stack says whose call it
// was taken in.
//
// usage: goscopeburn START_FILE CALLS
//
// It waits for START_FILE, then each of the 4 goroutines makes CALLS calls
// of main.burnScope, and it prints "migrations N": how many calls ended on
// another thread than they started on.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var sink atomic.Uint64

// burnScope burns about 30 ms of CPU in slices, yielding after each and
// sleeping after every fourth: the goroutine is rescheduled, often on
// another thread.
//
//go:noinline
func burnScope() {
	for i := 0; i < 12; i++ {
		spin(2500 * time.Microsecond)
		runtime.Gosched()
		if i%4 == 3 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

//go:noinline
func spin(d time.Duration) {
	end := time.Now().Add(d)
	var x uint64
	for time.Now().Before(end) {
		// Few clock reads: a sample in the vDSO clock says little.
		for i := 0; i < 200000; i++ {
			x += uint64(i)
		}
	}
	sink.Add(x)
}

var migrations atomic.Int64

// call runs one burnScope and counts a change of thread.
func call() {
	before := syscall.Gettid()
	burnScope()
	if syscall.Gettid() != before {
		migrations.Add(1)
	}
}

//go:noinline
func worker0(n int) {
	for i := 0; i < n; i++ {
		call()
		time.Sleep(5 * time.Millisecond)
	}
}

//go:noinline
func worker1(n int) {
	for i := 0; i < n; i++ {
		call()
		time.Sleep(5 * time.Millisecond)
	}
}

//go:noinline
func worker2(n int) {
	for i := 0; i < n; i++ {
		call()
		time.Sleep(5 * time.Millisecond)
	}
}

//go:noinline
func worker3(n int) {
	for i := 0; i < n; i++ {
		call()
		time.Sleep(5 * time.Millisecond)
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: goscopeburn START_FILE CALLS")
		os.Exit(2)
	}
	calls, _ := strconv.Atoi(os.Args[2])
	for {
		if _, err := os.Stat(os.Args[1]); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, w := range []func(int){worker0, worker1, worker2, worker3} {
		wg.Add(1)
		go func() { defer wg.Done(); w(calls) }()
	}
	wg.Wait()
	fmt.Printf("migrations %d\n", migrations.Load())
}
