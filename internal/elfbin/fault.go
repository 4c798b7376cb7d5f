package elfbin

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
)

// ErrTruncated reports a fault reading a mapped file: it was truncated
// while it was read, as whoever can write it can do.
var ErrTruncated = errors.New("the file shrank while it was read")

// parserPanics counts the panics recovered while parsing a file that were
// not memory faults: bugs in a parser (ours or debug/*), which must not
// vanish silently.
var parserPanics atomic.Int64

// ParserPanics returns the panics recovered, in this process, while
// parsing binaries and debug files that were not a fault reading a mapped
// file: each is a parser bug met on some input. The read that met it
// failed; the profiler ran on.
func ParserPanics() int64 { return parserPanics.Load() }

// GuardFaults turns a fault reading a mapped file (truncated under us:
// SIGBUS) into a panic the caller recovers from, until the returned
// function runs. Every read of a mapped file runs under it.
func GuardFaults() (restore func()) {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

// Recovered turns r, recovered while parsing what, into an error that
// names it. A fault reading a mapped file (which GuardFaults turns into a
// runtime.Error carrying the address) wraps ErrTruncated; any other panic
// is a parser bug, counted in ParserPanics.
func Recovered(r any, what string) error {
	if addr, ok := faultAddr(r); ok {
		return fmt.Errorf("%s: fault at %#x reading the mapped file: %w", what, addr, ErrTruncated)
	}
	parserPanics.Add(1)
	return fmt.Errorf("%s: parser panic: %v", what, r)
}

// Guard runs fn, which parses a mapped file, under GuardFaults: a fault
// or a parser panic in it is returned as Recovered's error.
func Guard(what string, fn func()) (err error) {
	defer GuardFaults()()
	defer func() {
		if r := recover(); r != nil {
			err = Recovered(r, what)
		}
	}()
	fn()
	return nil
}

// faultAddr returns the address of the memory fault r is the panic of:
// debug.SetPanicOnFault's runtime.Error carries it, a nil dereference's
// does not.
func faultAddr(r any) (uintptr, bool) {
	if _, ok := r.(runtime.Error); !ok {
		return 0, false
	}
	f, ok := r.(interface{ Addr() uintptr })
	if !ok {
		return 0, false
	}
	return f.Addr(), true
}
