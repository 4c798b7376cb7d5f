//go:build linux

package elfbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRecoveredCountsParserPanics recovers a parser bug (an index out of
// range, as a table read with a count taken from the file raises): it is
// counted, and the error names what was parsed.
func TestRecoveredCountsParserPanics(t *testing.T) {
	before := ParserPanics()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = Recovered(r, "decoding .gopclntab")
			}
		}()
		table := make([]uint32, 2)
		n := len(os.Args) + 5 // a count the table does not hold
		tableSink = table[n]
		return nil
	}()
	if err == nil || !strings.HasPrefix(err.Error(), "decoding .gopclntab: parser panic: ") {
		t.Fatalf("error %v: want one naming .gopclntab and the panic", err)
	}
	if got := ParserPanics() - before; got != 1 {
		t.Fatalf("ParserPanics grew by %d, want 1", got)
	}
}

// TestRecoveredFaultNotCounted reads a mapped page of a file truncated
// under the mapping: the SIGBUS is the file's doing, not a parser bug, so
// it fails the read without being counted.
func TestRecoveredFaultNotCounted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 2*os.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, 2*os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	before := ParserPanics()
	err = func() (err error) {
		defer GuardFaults()()
		defer func() {
			if r := recover(); r != nil {
				err = Recovered(r, "reading .debug_info")
			}
		}()
		faultSink = data[os.Getpagesize()]
		return nil
	}()
	if err == nil || !strings.HasPrefix(err.Error(), "reading .debug_info: fault at 0x") || !errors.Is(err, ErrTruncated) {
		t.Fatalf("error %v: want the fault, naming .debug_info, as ErrTruncated", err)
	}
	t.Logf("fault: %v", err)
	if got := ParserPanics() - before; got != 0 {
		t.Fatalf("ParserPanics grew by %d on a fault", got)
	}
}

// Sinks keep the reads the tests make from being compiled away.
var (
	faultSink byte
	tableSink uint32
)

// TestGuard runs reads under Guard: one of a mapped file truncated under
// it, as the writer of a file in a watched directory can do while bpfcol
// reads it, is ErrTruncated, not a crash; a parser's panic is an error
// too, and counted.
func TestGuard(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := MapShared(f, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(data)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := Guard("reading f", func() { faultSink = data[1<<15] }); !errors.Is(err, ErrTruncated) {
		t.Fatalf("reading a truncated mapping: %v, want %v", err, ErrTruncated)
	}
	if err := Guard("reading f", func() {}); err != nil {
		t.Fatal(err)
	}
	before := ParserPanics()
	err = Guard("parsing f", func() { panic("a parser bug") })
	if err == nil || errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "parsing f: parser panic: a parser bug") {
		t.Fatalf("a parser's panic gave %v", err)
	}
	if got := ParserPanics() - before; got != 1 {
		t.Fatalf("ParserPanics grew by %d, want 1", got)
	}
}
