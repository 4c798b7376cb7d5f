// Package testworkload builds and runs small real programs (C and Go) whose
// stacks and symbols are known by construction, so tests in other packages can
// check profiling and unwinding against real binaries instead of mocks.
package testworkload

import (
	"bytes"
	"embed"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// sources holds the workload sources. Go workloads are directories without a
// go.mod (embed cannot cross module boundaries); Compile writes one.
//
//go:embed src
var sources embed.FS

// CPUHogFlags returns the gcc flags cpuhog.c is meant to be built with: frame
// pointers everywhere except in the frameless leaf.
func CPUHogFlags() []string {
	return []string{"-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"}
}

// BuildC compiles the named C source under src/ (for example "cpuhog.c") with
// gcc and the extra flags, and returns the path of the binary in a temp dir.
// Without gcc the test is skipped, or fails under BPFCOL_REQUIRE_BPF=1.
func BuildC(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: GCC, Name: name, Flags: flags})
}

// BuildGo builds the named Go workload (a directory under src/, for example
// "gohog") with the extra `go build` flags, and returns the binary's path.
func BuildGo(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return build(t, Workload{Compiler: Go, Name: name, Flags: flags})
}

// Start runs bin with args. The process is killed and reaped when the test
// finishes; its output is reported if the test failed.
func Start(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		// Kill fails harmlessly when the process already exited; Wait
		// reaps it either way.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && out.Len() > 0 {
			t.Logf("output of %s:\n%s", bin, out.String())
		}
	})
	return cmd
}

// build returns w built for this test: taken from the prebuilt directory
// when PrebuiltEnv names one, else compiled with the host's compiler
// (without it the test is skipped, or fails under BPFCOL_REQUIRE_BPF=1).
func build(t testing.TB, w Workload) string {
	t.Helper()
	if dir := os.Getenv(PrebuiltEnv); dir != "" {
		return prebuilt(t, dir, w)
	}
	testenv.LookPath(t, HostToolchain.command(w.Compiler))
	bin, err := Compile(w, HostToolchain, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildTimeout bounds a compiler run so a wedged toolchain fails the test
// instead of hanging it.
const buildTimeout = 5 * time.Minute
