package testenv

import (
	"bytes"
	"os"
	"testing"
)

const kptrRestrict = "/proc/sys/kernel/kptr_restrict"

// Kallsyms returns the text of /proc/kallsyms with its addresses shown.
// The kernel decides at open whether a reader sees addresses, from
// kernel.kptr_restrict and the opener's CAP_SYSLOG; the sysctl is global,
// so no namespace helps. When they are hidden and the test may write the
// sysctl, Kallsyms lowers it to 1 (CAP_SYSLOG holders see addresses) for
// the open alone and restores it at once. Otherwise it skips t, or fails
// it under BPFCOL_REQUIRE_BPF=1.
func Kallsyms(t testing.TB) []byte {
	t.Helper()
	text, err := readKallsyms()
	if err != nil {
		unavailable(t, err.Error())
	}
	if showsAddresses(text) {
		return text
	}
	var f *os.File
	var openErr error
	old := ShowKernelAddresses(t, func() { f, openErr = os.Open("/proc/kallsyms") })
	if openErr != nil {
		unavailable(t, openErr.Error())
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		unavailable(t, "reading /proc/kallsyms: "+err.Error())
	}
	if !showsAddresses(buf.Bytes()) {
		unavailable(t, "kallsyms addresses are hidden even with kptr_restrict=1 (no CAP_SYSLOG?)")
	}
	t.Logf("read /proc/kallsyms with kptr_restrict lifted from %s to 1", old)
	return buf.Bytes()
}

// ShowKernelAddresses runs fn with kernel.kptr_restrict at 1, where
// CAP_SYSLOG holders see kernel addresses (in /proc/kallsyms and BPF
// program info), and restores the old value when fn returns; it returns
// that value. Keep fn short: the sysctl is global. When the sysctl cannot
// be written it skips t, or fails it under BPFCOL_REQUIRE_BPF=1.
func ShowKernelAddresses(t testing.TB, fn func()) (old string) {
	t.Helper()
	b, err := os.ReadFile(kptrRestrict)
	if err != nil {
		unavailable(t, "kernel addresses are hidden and "+err.Error())
	}
	old = string(bytes.TrimSpace(b))
	if err := os.WriteFile(kptrRestrict, []byte("1\n"), 0); err != nil {
		unavailable(t, "kernel addresses are hidden and lifting kptr_restrict failed: "+err.Error())
	}
	defer func() {
		if err := os.WriteFile(kptrRestrict, b, 0); err != nil {
			t.Fatalf("restoring %s to %s: %v", kptrRestrict, old, err)
		}
	}()
	fn()
	return old
}

func readKallsyms() ([]byte, error) {
	return os.ReadFile("/proc/kallsyms")
}

// showsAddresses reports whether any line of kallsyms text has a non-zero
// address: hidden addresses all read as zero.
func showsAddresses(text []byte) bool {
	for line := range bytes.Lines(text) {
		addr, _, _ := bytes.Cut(line, []byte(" "))
		if len(bytes.Trim(addr, "0")) > 0 {
			return true
		}
	}
	return false
}
