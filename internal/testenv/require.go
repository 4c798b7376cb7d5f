package testenv

import (
	"fmt"
	"os"
	"strings"
)

// A KernelFeature is a kernel capability some tests need that older
// kernels lack, so that BPFCOL_REQUIRE_BPF=1 alone does not demand it (the
// tests run on 6.1 too). Its own variable, BPFCOL_REQUIRE_<NAME>=1, turns
// its absence into a failure: CI sets it where the kernel has it
// (.ci/run).
type KernelFeature struct {
	// Name is the feature as messages name it, such as "BPF task work".
	Name string
	// Env is the variable that makes the feature mandatory.
	Env string
	// Since is the first kernel with it, for the message.
	Since string
}

// Kernel features tests ask for by name.
var (
	TaskWork    = KernelFeature{Name: "BPF task work", Env: "BPFCOL_REQUIRE_TASK_WORK", Since: "6.18"}
	UprobeMulti = KernelFeature{Name: "uprobe_multi links", Env: "BPFCOL_REQUIRE_UPROBE_MULTI", Since: "6.6"}
)

// Required reports whether the environment makes f mandatory.
func (f KernelFeature) Required() bool { return os.Getenv(f.Env) == "1" }

// Kernel skips t when missing (the error that says the kernel lacks f) is
// not nil, or fails it when f's variable requires the feature. The skip
// names f, so a run on an older kernel says which tests it left out.
func Kernel(t TB, f KernelFeature, missing error) {
	t.Helper()
	if missing == nil {
		return
	}
	why := fmt.Sprintf("kernel lacks %s (since %s): %v", f.Name, f.Since, missing)
	if f.Required() {
		t.Fatalf("%s, and %s=1 requires it", why, f.Env)
	}
	t.Skip(why)
}

// Has reports whether the kernel has f (missing is nil), for a test that
// runs either way but checks something else on each path: it says which
// path it took in the test's log, and fails when f's variable requires
// the feature and it is missing, so a path switch is never silent.
func Has(t TB, f KernelFeature, missing error) bool {
	t.Helper()
	if missing == nil {
		t.Logf("kernel has %s", f.Name)
		return true
	}
	if f.Required() {
		t.Fatalf("kernel lacks %s (since %s): %v, and %s=1 requires it", f.Name, f.Since, missing, f.Env)
	}
	t.Logf("kernel lacks %s (since %s): %v; testing the path without it", f.Name, f.Since, missing)
	return false
}

// RequireFile skips t, or fails it under BPFCOL_REQUIRE_BPF=1, unless path
// exists; pkg names what installs it.
func RequireFile(t TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		unavailable(t, fmt.Sprintf("%s is missing (package %s, scripts/install-deps.sh installs it): %v", path, pkg, err))
	}
}

// RequirePlatform skips t, or fails it under BPFCOL_REQUIRE_BPF=1, unless
// ok: for a test whose expected values hold on one platform, which what
// names ("4 KiB pages", "amd64").
func RequirePlatform(t TB, ok bool, what string) {
	t.Helper()
	if !ok {
		unavailable(t, "the test's expected values assume "+what)
	}
}

// TB is the part of testing.TB the checks use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Logf(format string, args ...any)
}

// lookPathMessage names the missing tools for LookPath's skip.
func lookPathMessage(names []string) string {
	return fmt.Sprintf("none of %s is installed (scripts/install-deps.sh installs them)", strings.Join(names, ", "))
}
