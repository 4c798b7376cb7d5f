package testworkload

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// PrebuiltEnv names the directory of workloads built ahead of the tests, for
// a machine without compilers: the VMs of test/vmtest, where the tests run
// without gcc or Go. Each build is at PrebuiltPath.
const PrebuiltEnv = "BPFCOL_PREBUILT_WORKLOADS"

// PrebuiltPath is where a build of w is kept under dir.
func PrebuiltPath(dir string, w Workload) string {
	return filepath.Join(dir, w.Key(), w.BinaryName())
}

// prebuilt returns a private copy of the prebuilt w (tests may change the
// file they get), and fails t when w was not built ahead.
func prebuilt(t testing.TB, dir string, w Workload) string {
	t.Helper()
	src, err := os.Open(PrebuiltPath(dir, w))
	if err != nil {
		t.Fatalf("workload %q was not built ahead for this machine (%s=%s): add it to test/vmtest/workloads.txt, or see why it did not build for this architecture in make vmtest's output: %v", w, PrebuiltEnv, dir, err)
	}
	defer src.Close()
	bin := filepath.Join(t.TempDir(), w.BinaryName())
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatalf("copying workload %s: %v", w.BinaryName(), err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
