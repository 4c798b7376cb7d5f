// Command gohog burns CPU in main.main -> main.middle -> main.leaf so profilers have a known stack.
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func leaf(n uint64) uint64 {
	x := n
	for i := 0; i < 1000000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func middle(n uint64) uint64 {
	r := leaf(n)
	sink = r
	return r + sink
}

func main() {
	var deadline time.Time
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil && s > 0 {
			deadline = time.Now().Add(time.Duration(s * float64(time.Second)))
		}
	}
	for i := uint64(0); ; i++ {
		sink = middle(i)
		if !deadline.IsZero() && i&63 == 0 && time.Now().After(deadline) {
			return
		}
	}
}
