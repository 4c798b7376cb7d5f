package dwarfsym

import (
	"os"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// workloadDir holds the binaries built once per test process.
var workloadDir string

func TestMain(m *testing.M) { os.Exit(symtest.Main(m, "dwarfsym-test-", &workloadDir)) }
