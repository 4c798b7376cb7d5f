//go:build linux

// goscope times a //go:noinline function from many goroutines that block
// and migrate between threads, for scope probes on Go code. Each goroutine
// logs its own measure of every outermost call.
//
// usage: goscope START_FILE OUT_FILE GOROUTINES CALLS [CALIBRATION_CALLS]
//
// It waits for START_FILE, then every goroutine makes CALLS outermost calls
// of main.blockingScope and writes one line per call to OUT_FILE:
//
//	call MS DEPTH DURATION_NS
//
// and "migrations N": how many calls ended on another thread than they
// started on. With CALIBRATION_CALLS it then times that many calls of
// main.probeCost, each after a 1 ms sleep, and writes "cost NS" for each,
// then "calibration CALLS MAX_NS".
package main

import (
	"bufio"
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

// blockingScope sleeps ms (the goroutine parks and may resume on another
// thread), recurses depth times with a frame large enough to grow a fresh
// goroutine's stack (morestack re-enters the function), and yields.
//
//go:noinline
func blockingScope(ms, depth int) {
	var frame [2048]byte
	frame[depth] = byte(ms)
	time.Sleep(time.Duration(ms) * time.Millisecond)
	runtime.Gosched()
	if depth > 0 {
		blockingScope(ms, depth-1)
	}
	sink.Add(uint64(frame[depth]))
}

// probeCost does nothing: timing it measures the probes on it.
//
//go:noinline
func probeCost(n int) int {
	var frame [64]byte
	frame[n&63] = byte(n)
	return int(frame[(n+1)&63])
}

func main() {
	if len(os.Args) != 5 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: goscope START_FILE OUT_FILE GOROUTINES CALLS")
		os.Exit(2)
	}
	goroutines, _ := strconv.Atoi(os.Args[3])
	calls, _ := strconv.Atoi(os.Args[4])
	for {
		if _, err := os.Stat(os.Args[1]); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f, err := os.Create(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(f)
	var mu sync.Mutex
	var migrations atomic.Int64
	var wg sync.WaitGroup
	sleeps := []int{1, 5, 20}
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				ms, depth := sleeps[(g+i)%len(sleeps)], (g+2*i)%3
				before := syscall.Gettid()
				start := time.Now()
				blockingScope(ms, depth)
				d := time.Since(start)
				if syscall.Gettid() != before {
					migrations.Add(1)
				}
				mu.Lock()
				fmt.Fprintf(w, "call %d %d %d\n", ms, depth, d.Nanoseconds())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(w, "migrations %d\n", migrations.Load())
	if len(os.Args) == 6 {
		n, _ := strconv.Atoi(os.Args[5])
		var slowest time.Duration
		costs := make([]time.Duration, n)
		for i := range n {
			time.Sleep(time.Millisecond)
			start := time.Now()
			sink.Add(uint64(probeCost(i)))
			costs[i] = time.Since(start)
			slowest = max(slowest, costs[i])
		}
		for _, c := range costs {
			fmt.Fprintf(w, "cost %d\n", c.Nanoseconds())
		}
		fmt.Fprintf(w, "calibration %d %d\n", n, slowest.Nanoseconds())
	}
	fmt.Fprintln(w, "done")
	w.Flush()
	f.Close()
}
