//go:build linux && (amd64 || arm64)

package ksymprog

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// kallsymsAddr returns the address /proc/kallsyms lists for a core kernel
// text symbol; the test's ground truth, never the formatter's input source.
func kallsymsAddr(t *testing.T, name string) uint64 { return kallsymsAddrOf(t, name, "tT") }

// kallsymsAddrOf is kallsymsAddr for a symbol of one of types (arm64's
// _etext is not a text symbol).
func kallsymsAddrOf(t *testing.T, name, types string) uint64 {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(testenv.Kallsyms(t)))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[2] == name && strings.ContainsAny(fs[1], types) {
			a, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if a == 0 {
				t.Fatalf("/proc/kallsyms lists %s at address 0", name)
			}
			return a
		}
	}
	t.Fatalf("%s not in /proc/kallsyms", name)
	return 0
}

func TestFormat(t *testing.T) {
	testenv.RequireBPF(t)
	f, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	vfsRead := kallsymsAddr(t, "vfs_read")
	addrs := []uint64{vfsRead, vfsRead + 1, vfsRead, 1}
	isReturn := []bool{false, false, true, false}
	got := make([]string, len(addrs))
	if err := f.Format(addrs, isReturn, func(i int, text []byte, truncated bool) {
		if truncated {
			t.Errorf("address %d: truncated %q", i, text)
		}
		got[i] = string(text)
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got[0], "vfs_read+0x0/0x") {
		t.Errorf("%%pS of vfs_read = %q, want vfs_read+0x0/...", got[0])
	}
	if !strings.HasPrefix(got[1], "vfs_read+0x1/0x") {
		t.Errorf("%%pS of vfs_read+1 = %q, want vfs_read+0x1/...", got[1])
	}
	// %pB looks up addr-1: the symbol before vfs_read, at its end.
	if strings.HasPrefix(got[2], "vfs_read+") {
		t.Errorf("%%pB of vfs_read = %q, want the preceding symbol", got[2])
	}
	if got[3] != "0x1" {
		t.Errorf("%%pS of 1 = %q, want 0x1", got[3])
	}
	t.Logf("%q", got)
}

func TestFormatSplitsBatches(t *testing.T) {
	testenv.RequireBPF(t)
	f, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	vfsRead := kallsymsAddr(t, "vfs_read")
	n := 2*MaxBatch + 7
	addrs := make([]uint64, n)
	isReturn := make([]bool, n)
	for i := range addrs {
		addrs[i] = vfsRead + uint64(i%16)
	}
	seen := 0
	if err := f.Format(addrs, isReturn, func(i int, text []byte, _ bool) {
		if i != seen {
			t.Fatalf("visited %d, want %d", i, seen)
		}
		seen++
		want := "vfs_read+0x" + strconv.FormatUint(uint64(i%16), 16) + "/"
		if !strings.HasPrefix(string(text), want) {
			t.Fatalf("address %d: %q, want prefix %q", i, text, want)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if seen != n {
		t.Fatalf("visited %d results, want %d", seen, n)
	}
}

// TestTextBounds looks the core kernel text's bounds up in BPF: they are
// _stext and _etext as /proc/kallsyms lists them.
func TestTextBounds(t *testing.T) {
	testenv.RequireBPF(t)
	f, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lo, hi, err := f.TextBounds()
	if err != nil {
		t.Fatal(err)
	}
	const anyType = "tTdDrRbBaA"
	if want := [2]uint64{kallsymsAddrOf(t, "_stext", anyType), kallsymsAddrOf(t, "_etext", anyType)}; [2]uint64{lo, hi} != want {
		t.Errorf("bounds %#x-%#x, kallsyms says %#x-%#x", lo, hi, want[0], want[1])
	}
}
