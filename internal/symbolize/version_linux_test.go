package symbolize

import (
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// TestVersionedSymbolsNamedWithoutVersion names the functions libc6-dbg's
// symbol table spells with a version (clock_nanosleep@@GLIBC_2.17, the
// default version of a versioned definition). The version is not part of
// the function's name: flame graphs show clock_nanosleep, and the symbol
// as spelled stays the frame's system name.
func TestVersionedSymbolsNamedWithoutVersion(t *testing.T) {
	dbg, syms := symtest.LibcDebugFile(t)
	f, err := os.Open(dbg)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	checked := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || !strings.Contains(s.Name, "@@") {
			continue
		}
		frames, ok := bin.Symbolize(s.Value)
		if !ok {
			t.Errorf("%s at %#x: not named", s.Name, s.Value)
			continue
		}
		checked++
		fr := frames[len(frames)-1]
		if strings.Contains(fr.Name, "@") {
			t.Errorf("%s at %#x named %q (system name %q): the version is in the name", s.Name, s.Value, fr.Name, fr.SystemName)
		}
		if base, _, ok := strings.Cut(fr.SystemName, "@"); ok && base != fr.Name {
			t.Errorf("%s at %#x named %q, system name %q", s.Name, s.Value, fr.Name, fr.SystemName)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d versioned functions in %s: the test proves nothing", checked, dbg)
	}
	t.Logf("%d versioned functions named", checked)
}
