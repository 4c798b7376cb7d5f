// Package testenv lets tests that need root or BPF skip where those are
// missing, and fail instead when BPFCOL_REQUIRE_BPF=1 (as in CI), so a
// privileged test never skips silently there.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
)

// RequireBPFEnv is the environment variable that turns skips into failures.
const RequireBPFEnv = "BPFCOL_REQUIRE_BPF"

// RequireBPF skips t, or fails it under BPFCOL_REQUIRE_BPF=1, unless the
// process can load BPF programs and open system-wide perf events.
func RequireBPF(t testing.TB) {
	t.Helper()
	missing, err := capability.Missing(capability.BPF, capability.Perfmon, capability.SysPtrace)
	switch {
	case err != nil:
		unavailable(t, "reading capabilities: "+err.Error())
	case len(missing) > 0:
		unavailable(t, "missing capability "+missing[0].String())
	}
}

// RequireRoot skips t, or fails it under BPFCOL_REQUIRE_BPF=1, unless the
// test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root")
	}
}

// Unavailable skips t for why, or fails it under BPFCOL_REQUIRE_BPF=1: for
// any condition a privileged test needs that the machine may lack.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	unavailable(t, why)
}

// LookPath returns the path of the first of names found in PATH, and skips
// t (or fails it under BPFCOL_REQUIRE_BPF=1) when none is installed.
func LookPath(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	unavailable(t, lookPathMessage(names))
	return ""
}

func unavailable(t TB, why string) {
	t.Helper()
	if os.Getenv(RequireBPFEnv) == "1" {
		t.Fatalf("%s, and %s=1 forbids skipping", why, RequireBPFEnv)
	}
	t.Skip(why)
}
