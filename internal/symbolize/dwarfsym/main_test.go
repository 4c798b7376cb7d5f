package dwarfsym

import (
	"fmt"
	"os"
	"testing"
)

// workloadDir holds the binaries built once per test process.
var workloadDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dwarfsym-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating workload dir:", err)
		os.Exit(1)
	}
	workloadDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
