package testenv

import (
	"os"
	"testing"
)

// PeerProfilerEnv names the binary of the OpenTelemetry eBPF profiler that
// the side-by-side benchmarks run next to bin/bpfcol.
const PeerProfilerEnv = "BPFCOL_PEER_PROFILER"

// PeerProfiler returns the path of the OpenTelemetry eBPF profiler that
// BPFCOL_PEER_PROFILER names. The repository never builds it (its BPF code
// is GPL), so when the variable is unset t is skipped, under
// BPFCOL_REQUIRE_BPF=1 too, with how to build it; a variable naming no
// executable fails t.
func PeerProfiler(t testing.TB) string {
	t.Helper()
	p := os.Getenv(PeerProfilerEnv)
	if p == "" {
		t.Skip(PeerProfilerEnv + " is not set: build the OpenTelemetry eBPF profiler from its source " +
			"(CGO_ENABLED=0 go build -tags osusergo,netgo; where RLIMIT_MEMLOCK cannot be raised, make its raise non-fatal; " +
			"NOTES.md \"The peer, side by side\") and set " + PeerProfilerEnv + " to the binary")
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s=%s names no executable file (%v)", PeerProfilerEnv, p, err)
	}
	return p
}
