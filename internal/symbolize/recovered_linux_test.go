//go:build linux

package symbolize

import (
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
				err = recovered(r, "decoding .gopclntab")
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
		defer guardFaults()()
		defer func() {
			if r := recover(); r != nil {
				err = recovered(r, "reading .debug_info")
			}
		}()
		faultSink = data[os.Getpagesize()]
		return nil
	}()
	if err == nil || !strings.HasPrefix(err.Error(), "reading .debug_info: fault at 0x") {
		t.Fatalf("error %v: want the fault, naming .debug_info", err)
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
