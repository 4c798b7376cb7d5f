package elfsym

import (
	"debug/elf"
	"testing"
)

func funcSym(name string, bind elf.SymBind, value, size uint64) elf.Symbol {
	return elf.Symbol{Name: name, Info: elf.ST_INFO(bind, elf.STT_FUNC), Section: 1, Value: value, Size: size}
}

// TestELFSymbolTableRules covers the rules real toolchain output rarely
// shows at once: undefined and non-function symbols, zero sizes, aliases
// whose sizes disagree, and a function nested in another.
func TestELFSymbolTableRules(t *testing.T) {
	syms := []elf.Symbol{
		{Name: "undefined", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC), Section: elf.SHN_UNDEF, Value: 0x1000},
		{Name: "object", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Section: 1, Value: 0x1000, Size: 0x100},
		{Name: "ifunc", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_GNU_IFUNC), Section: 1, Value: 0x900, Size: 0x10},
		funcSym("local_alias", elf.STB_LOCAL, 0x1000, 0x40),
		funcSym("weak_alias", elf.STB_WEAK, 0x1000, 0x40),
		funcSym("global_zero", elf.STB_GLOBAL, 0x1000, 0),
		funcSym("zero", elf.STB_LOCAL, 0x2000, 0),
		funcSym("outer", elf.STB_GLOBAL, 0x3000, 0x100),
		funcSym("inner", elf.STB_LOCAL, 0x3040, 0x10),
	}
	tab := FromSymbols(syms)
	cases := []struct {
		addr uint64
		name string // "" for no symbol
	}{
		{0x0fff, ""},
		{0x900, "ifunc"},
		{0x90f, "ifunc"},
		{0x910, ""},
		{0x1000, "global_zero"}, // global wins; the aliases' size carries over
		{0x103f, "global_zero"},
		{0x1040, ""}, // never stretched to the next symbol
		{0x2000, "zero"},
		{0x2001, ""}, // a zero-size symbol covers only its start
		{0x3040, "inner"},
		{0x304f, "inner"},
		{0x3050, "outer"}, // past the nested one, still in the outer one
		{0x30ff, "outer"},
		{0x3100, ""},
	}
	for _, c := range cases {
		f, ok := tab.Lookup(c.addr)
		if c.name == "" {
			if ok {
				t.Errorf("lookup(%#x) = %q, want nothing", c.addr, f.Name)
			}
			continue
		}
		if !ok || f.Name != c.name {
			t.Errorf("lookup(%#x) = %v, %v; want %q", c.addr, f, ok, c.name)
		}
	}
	// The alias choice must not depend on symbol table order.
	for i, j := 0, len(syms)-1; i < j; i, j = i+1, j-1 {
		syms[i], syms[j] = syms[j], syms[i]
	}
	if f, ok := FromSymbols(syms).Lookup(0x1000); !ok || f.Name != "global_zero" {
		t.Errorf("reversed table: lookup(0x1000) = %v, %v; want global_zero", f, ok)
	}
	var empty *Table
	if _, ok := empty.Lookup(0x1000); ok {
		t.Error("nil table resolved an address")
	}
}
