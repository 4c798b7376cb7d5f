package loader

import (
	"debug/elf"
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
)

// TestLoadBiasSkipsSharedPage uses the layout rustc's linker emits: the
// read-only segment ends inside the page where the code segment starts,
// at another offset-to-address delta. The code mapping must get the code
// segment's delta.
func TestLoadBiasSkipsSharedPage(t *testing.T) {
	loads := []elf.ProgHeader{
		{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0, Filesz: 0x12840},
		{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x12840, Vaddr: 0x13840, Filesz: 0x3e000},
	}
	m := &process.Mapping{Start: 0x5600_0001_3000, End: 0x5600_0005_1000, Offset: 0x12000, Perms: "r-xp"}
	bias, ok := loadBias(loads, m)
	if !ok {
		t.Fatal("no segment found")
	}
	// vaddr 0x13840 is at file offset 0x12840, mapped at Start+0x840.
	if got := 0x13840 + bias; got != m.Start+0x840 {
		t.Fatalf("vaddr 0x13840 at %#x, want %#x", got, m.Start+0x840)
	}
}

func TestArenaMergesFreedRuns(t *testing.T) {
	a := newArena(100)
	x, _ := a.alloc(30)
	y, _ := a.alloc(30)
	z, _ := a.alloc(40)
	if _, ok := a.alloc(1); ok {
		t.Fatal("allocated past the end")
	}
	a.release(x, 30)
	a.release(z, 40)
	if _, ok := a.alloc(50); ok {
		t.Fatal("allocated 50 rows in two runs of 30 and 40")
	}
	a.release(y, 30)
	if first, ok := a.alloc(100); !ok || first != 0 || a.used != 100 {
		t.Fatalf("whole store after freeing all: %d %v (used %d)", first, ok, a.used)
	}
}
