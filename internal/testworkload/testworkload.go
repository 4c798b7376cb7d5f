// Package testworkload builds and runs small real programs (C and Go) whose
// stacks and symbols are known by construction, so tests in other packages can
// check profiling and unwinding against real binaries instead of mocks.
package testworkload

import (
	"bytes"
	"context"
	"embed"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// sources holds the workload sources. Go workloads are directories without a
// go.mod (embed cannot cross module boundaries); BuildGo writes one.
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
	return buildSingle(t, lookTool(t, "gcc"), name, flags)
}

// BuildGo builds the named Go workload (a directory under src/, for example
// "gohog") with the extra `go build` flags, and returns the binary's path.
func BuildGo(t testing.TB, name string, flags ...string) string {
	t.Helper()
	goTool := lookTool(t, "go")
	sub, err := fs.Sub(sources, path.Join("src", name))
	if err != nil {
		t.Fatalf("opening workload %q: %v", name, err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatalf("copying workload %q: %v", name, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
		t.Fatalf("workload %q has no main.go: %v", name, err)
	}
	goMod := "module " + name + "\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatalf("writing go.mod: %v", err)
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{"build"}, flags...), "-o", bin, ".")
	// The workload is its own module; keep the caller's workspace and
	// flags (e.g. -mod=vendor) out of it.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	run(t, dir, env, goTool, args...)
	return bin
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

func lookTool(t testing.TB, name string) string {
	t.Helper()
	return testenv.LookPath(t, name)
}

// buildTimeout bounds a compiler run so a wedged toolchain fails the test
// instead of hanging it.
const buildTimeout = 5 * time.Minute

func run(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
