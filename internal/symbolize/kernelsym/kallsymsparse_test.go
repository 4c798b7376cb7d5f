package kernelsym

import (
	"bufio"
	"bytes"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

func TestLoadKallsymsRules(t *testing.T) {
	const input = `ffffffff81000000 T first_alias
ffffffff81000000 T second_alias
ffffffff81000010 t local_fn
ffffffff81000020 D some_data
ffffffff81000030 W weak_fn
ffffffff81000040 d data_before_text
ffffffff81000040 T text_after_data
ffffffffc0000000 t mod_fn	[mymod]
ffffffffc0000100 t mod_last	[mymod]
ffffffffc0001000 t bpf_prog_abc_f	[bpf]
`
	k, err := loadKallsyms(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		addr   uint64
		name   string // "" for none
		module string
		offset uint64
	}{
		{0xffffffff80ffffff, "", "", 0},
		{0xffffffff81000000, "first_alias", "", 0},
		{0xffffffff8100000f, "first_alias", "", 0xf},
		{0xffffffff81000010, "local_fn", "", 0},
		{0xffffffff8100001f, "local_fn", "", 0xf},
		{0xffffffff81000020, "", "", 0}, // data
		{0xffffffff81000030, "weak_fn", "", 0},
		{0xffffffff81000040, "text_after_data", "", 0},
		{0xffffffff81000041, "", "", 0}, // last core symbol: start only
		{0xffffffffc0000050, "mod_fn", "mymod", 0x50},
		{0xffffffffc0000100, "mod_last", "mymod", 0},
		{0xffffffffc0000101, "", "", 0}, // size stops at the module boundary
		{0xffffffffc0001000, "bpf_prog_abc_f", "bpf", 0},
	}
	for _, c := range cases {
		sym, off, ok := k.Lookup(c.addr)
		if c.name == "" {
			if ok {
				t.Errorf("Lookup(%#x) = %+v, want nothing", c.addr, sym)
			}
			continue
		}
		if !ok || sym.Name != c.name || sym.Module != c.module || off != c.offset {
			t.Errorf("Lookup(%#x) = %+v+%#x, %v; want %s [%s]+%#x", c.addr, sym, off, ok, c.name, c.module, c.offset)
		}
	}
	if _, err := loadKallsyms(strings.NewReader("0000000000000000 T a\n0000000000000000 t b\n")); !errors.Is(err, errKallsymsHidden) {
		t.Errorf("all-zero kallsyms: err = %v, want errKallsymsHidden", err)
	}
}

// kallsymsLine is one line of /proc/kallsyms, in file order.
type kallsymsLine struct {
	addr         uint64
	typ          byte
	name, module string
}

func TestLoadKallsymsReal(t *testing.T) {
	raw := testenv.Kallsyms(t) // addresses shown, or the test skips (fails in CI)
	k, err := loadKallsyms(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var lines []kallsymsLine
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		l := kallsymsLine{addr: addr, typ: f[1][0], name: f[2]}
		if len(f) > 3 {
			l.module = strings.Trim(f[3], "[]")
		}
		lines = append(lines, l)
	}
	isText := func(c byte) bool { return strings.IndexByte("tTwW", c) >= 0 }

	// First text name per address, in file order.
	first := map[uint64]kallsymsLine{}
	aliases := map[uint64]int{}
	for _, l := range lines {
		if !isText(l.typ) {
			continue
		}
		aliases[l.addr]++
		if _, ok := first[l.addr]; !ok {
			first[l.addr] = l
		}
	}
	if k.Len() != len(first) {
		t.Errorf("Len() = %d, /proc/kallsyms has %d distinct text addresses", k.Len(), len(first))
	}
	sawAlias := false
	for addr, l := range first {
		sym, off, ok := k.Lookup(addr)
		if !ok || off != 0 || sym.Name != l.name || sym.Module != l.module {
			t.Fatalf("Lookup(%#x) = %+v+%#x, %v; the first text line there is %+v", addr, sym, off, ok, l)
		}
		sawAlias = sawAlias || aliases[addr] > 1
	}
	if !sawAlias {
		t.Log("no aliased text addresses in this kernel's kallsyms")
	}

	// Size: up to the next higher address of any type in the same module.
	sorted := append([]kallsymsLine(nil), lines...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].addr < sorted[j].addr })
	checked := 0
	for i := 0; i < len(sorted); i++ {
		l := sorted[i]
		if first[l.addr] != l {
			continue
		}
		j := i + 1
		for j < len(sorted) && sorted[j].addr == l.addr {
			j++
		}
		if j == len(sorted) || sorted[j].module != l.module {
			// Nothing bounds the last symbol of a module: it covers only
			// its start.
			if sym, _, ok := k.Lookup(l.addr + 1); ok && sym.Addr == l.addr {
				t.Errorf("last symbol of its module %+v covers %#x", l, l.addr+1)
			}
			continue
		}
		next := sorted[j].addr
		sym, off, ok := k.Lookup(next - 1)
		if !ok || sym.Addr != l.addr || sym.Name != l.name || off != next-1-l.addr || sym.Size != next-l.addr {
			t.Fatalf("Lookup(%#x) = %+v+%#x, %v; want %s+%#x (next symbol %+v)", next-1, sym, off, ok, l.name, next-1-l.addr, sorted[j])
		}
		if sym, _, ok := k.Lookup(next); ok && sym.Addr == l.addr {
			t.Fatalf("Lookup(%#x) = %+v, stretched over the next symbol %+v", next, sym, sorted[j])
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no kallsyms symbol had a size to check")
	}
}
