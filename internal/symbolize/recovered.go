package symbolize

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// parserPanics counts the panics recovered while parsing a file that were
// not memory faults: bugs in a parser (ours or debug/*), which must not
// vanish silently.
var parserPanics atomic.Int64

// ParserPanics returns the panics recovered, in this process, while
// parsing binaries and debug files that were not a fault reading a mapped
// file: each is a parser bug met on some input. The lookup that met it
// failed; the profiler ran on.
func ParserPanics() int64 { return parserPanics.Load() }

// recovered turns r, recovered while parsing what, into an error that
// names it. A fault reading a mapped file (truncated under us: SIGBUS,
// which guardFaults turns into a runtime.Error carrying the address) is
// expected; any other panic is counted in parserPanics.
func recovered(r any, what string) error {
	if addr, ok := faultAddr(r); ok {
		return fmt.Errorf("%s: fault at %#x reading the mapped file (truncated under us?)", what, addr)
	}
	parserPanics.Add(1)
	return fmt.Errorf("%s: parser panic: %v", what, r)
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
