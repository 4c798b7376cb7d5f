// Command goworkload is the Go workload for the symbolize tests: a few
// functions, some inlinable, some not, and a method.
package main

import (
	"fmt"
	"os"
)

type accumulator struct{ total uint64 }

//go:noinline
func (a *accumulator) add(v uint64) { a.total += mix(v) }

// mix is small enough to be inlined into its callers.
func mix(v uint64) uint64 { return v*0x9e3779b97f4a7c15 ^ v>>7 }

//go:noinline
func work(n int) uint64 {
	var a accumulator
	for i := 0; i < n; i++ {
		a.add(uint64(i))
		a.total += mix(a.total)
	}
	return a.total
}

func main() {
	fmt.Fprintln(os.Stdout, work(len(os.Args)*1000))
}
