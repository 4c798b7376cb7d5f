//go:build linux && (amd64 || arm64)

package profiler

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// childEnv marks the re-executed test binary that runs without capabilities.
const childEnv = "BPFCOL_PROFILER_CAP_CHILD"

// TestNewNamesMissingCapability re-runs this test binary with CAP_BPF,
// CAP_PERFMON and CAP_SYS_ADMIN dropped and expects New to fail naming them.
func TestNewNamesMissingCapability(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		_, err := New(Options{Frequency: 20})
		if err == nil {
			t.Fatal("New succeeded without CAP_BPF/CAP_PERFMON")
		}
		os.Stdout.WriteString("ERROR: " + err.Error() + "\n")
		return
	}
	testenv.RequireRoot(t)
	capsh, err := exec.LookPath("capsh")
	if err != nil {
		t.Fatalf("capsh (Debian package libcap2-bin) is needed: %v", err)
	}
	cmd := exec.Command(capsh, "--drop=cap_bpf,cap_perfmon,cap_sys_admin", "--",
		"-c", os.Args[0]+" -test.run '^TestNewNamesMissingCapability$' -test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	for _, want := range []string{"missing capability", "CAP_BPF", "CAP_PERFMON"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("error does not name %q:\n%s", want, out)
		}
	}
}
