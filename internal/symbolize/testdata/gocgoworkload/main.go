// Command gocgoworkload is the cgo workload for the symbolize tests. Linked
// externally as PIE, C start-up code precedes runtime.text in .text, so
// .gopclntab's base differs from the .text section start.
package main

/*
static int cadd(int a, int b) { return a + b; }
*/
import "C"

import "fmt"

//go:noinline
func work(n int) int { return int(C.cadd(C.int(n), 2)) }

func main() { fmt.Println(work(3)) }
