package uproberecv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardFaultsTruncatedFile reads a mapped file truncated under it, as
// the writer of a file in a watched directory can do while bpfcol reads
// it: the fault is an error, not a crash; other panics go on.
func TestGuardFaultsTruncatedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var b byte
	if err := guardFaults(func() { b = data[1<<15] }); !errors.Is(err, errFileShrank) {
		t.Fatalf("reading a truncated mapping: %v (read %d), want %v", err, b, errFileShrank)
	}
	if err := guardFaults(func() {}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != "other" {
			t.Fatalf("recovered %v, want the other panic passed on", r)
		}
	}()
	_ = guardFaults(func() { panic("other") })
}
