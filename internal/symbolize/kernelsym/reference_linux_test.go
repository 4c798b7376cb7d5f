package kernelsym

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// reference resolves core kernel addresses from /proc/kallsyms by the
// kernel's own rules (kernel/kallsyms.c: is_ksym_addr, get_symbol_pos,
// __sprint_symbol), independently of the code under test.
type reference struct {
	syms                               []refSym // core symbols in kallsyms order, which is address order
	text                               []refSym // core text symbols: where test addresses come from
	stext, etext, sinittext, einittext uint64
	// all is CONFIG_KALLSYMS_ALL (Debian's kernels have it, this
	// machine's not): every address of the image up to end resolves,
	// exit text too, and kallsyms lists the data symbols.
	all      bool
	end      uint64
	dataSyms int
}

type refSym struct {
	addr uint64
	name string
}

func loadReference(t testing.TB) *reference {
	t.Helper()
	r := &reference{}
	sc := bufio.NewScanner(bytes.NewReader(testenv.Kallsyms(t)))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 { // module, bpf and ftrace lines carry a 4th field
			continue
		}
		addr, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		s := refSym{addr, fs[2]}
		r.syms = append(r.syms, s)
		switch fs[1] {
		case "t", "T", "w", "W":
			r.text = append(r.text, s)
		case "d", "D", "b", "B":
			r.dataSyms++
		}
		switch s.name {
		case "_stext":
			r.stext = addr
		case "_etext":
			r.etext = addr
		case "_sinittext":
			r.sinittext = addr
		case "_einittext":
			r.einittext = addr
		case "_end":
			r.end = addr
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if r.stext == 0 || r.etext == 0 {
		t.Fatal("/proc/kallsyms lists no _stext or _etext")
	}
	// Without CONFIG_KALLSYMS_ALL a few dozen section markers are the
	// only data symbols; with it, tens of thousands.
	r.all = r.dataSyms > 1000
	if r.all && r.end == 0 {
		t.Fatal("/proc/kallsyms lists the data symbols (CONFIG_KALLSYMS_ALL) but no _end")
	}
	t.Logf("CONFIG_KALLSYMS_ALL %v (%d data symbols)", r.all, r.dataSyms)
	if !slices.IsSortedFunc(r.syms, func(a, b refSym) int { return cmpUint(a.addr, b.addr) }) {
		t.Fatal("core kallsyms are not in address order; the reference's first-name rule assumes they are")
	}
	return r
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *reference) isKsymAddr(a uint64) bool {
	if a >= r.sinittext && a < r.einittext {
		return true
	}
	// CONFIG_KALLSYMS_ALL: the whole image (is_kernel); else only core
	// text and init text resolve.
	if r.all {
		return a >= r.stext && a < r.end
	}
	return a >= r.stext && a < r.etext
}

// lookup is %pB when isReturn, else %pS.
func (r *reference) lookup(addr uint64, isReturn bool) Symbol {
	a := addr
	if isReturn {
		a--
	}
	if !r.isKsymAddr(a) {
		return Symbol{}
	}
	// Last symbol at or below a, then back to the first of its aliases.
	i, found := slices.BinarySearchFunc(r.syms, a, func(s refSym, a uint64) int { return cmpUint(s.addr, a) })
	if found {
		for i+1 < len(r.syms) && r.syms[i+1].addr == a {
			i++
		}
	} else {
		i--
	}
	if i < 0 {
		return Symbol{}
	}
	for i > 0 && r.syms[i-1].addr == r.syms[i].addr {
		i--
	}
	start := r.syms[i].addr
	var end uint64
	for j := i + 1; j < len(r.syms); j++ {
		if r.syms[j].addr > start {
			end = r.syms[j].addr
			break
		}
	}
	if end == 0 {
		switch {
		case a >= r.sinittext && a < r.einittext:
			end = r.einittext
		case r.all:
			end = r.end
		default:
			end = r.etext
		}
	}
	off := a - start
	if isReturn {
		off++
	}
	return Symbol{Name: r.syms[i].name, Offset: off, Size: end - start, IsBPFProg: isBPFProgName([]byte(r.syms[i].name)), OK: true}
}

// sample picks n requests from real text symbols: a third exactly at a
// symbol's start, the rest at random offsets up to the next symbol
// (inclusive), each flagged as a return address with probability 1/2.
func (r *reference) sample(rng *rand.Rand, n int) ([]uint64, []bool) {
	addrs := make([]uint64, n)
	isReturn := make([]bool, n)
	for i := range addrs {
		k := rng.IntN(len(r.text))
		s := r.text[k]
		a := s.addr
		if i%3 != 0 {
			next := s.addr
			for j := k + 1; j < len(r.text) && next == s.addr; j++ {
				next = r.text[j].addr
			}
			if next > s.addr {
				a += rng.Uint64N(next - s.addr + 1)
			}
		}
		addrs[i] = a
		isReturn[i] = rng.IntN(2) == 0
	}
	return addrs, isReturn
}

// compare returns a description of every difference between got and the
// reference.
func (r *reference) compare(addrs []uint64, isReturn []bool, got []Symbol) []string {
	var diffs []string
	for i, a := range addrs {
		want := r.lookup(a, isReturn[i])
		if got[i] != want {
			diffs = append(diffs, fmt.Sprintf("%#x return=%v: got %+v, want %+v", a, isReturn[i], got[i], want))
		}
	}
	return diffs
}

func (r *reference) addrOf(t testing.TB, name string) uint64 {
	t.Helper()
	for _, s := range r.text {
		if s.name == name {
			return s.addr
		}
	}
	t.Fatalf("%s is not a text symbol in /proc/kallsyms", name)
	return 0
}
