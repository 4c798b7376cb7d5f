//go:build ignore

// A Go program: its CFI is a compressed .debug_frame with data alignment
// -4 and no .eh_frame.
package main

import "fmt"

func main() { fmt.Println("hello") }
