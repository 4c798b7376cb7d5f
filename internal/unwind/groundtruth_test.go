package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// The ground truth is the compiler's own CFI (.eh_frame / .debug_frame) as
// interpreted by readelf, at every instruction objdump finds, for every FDE.

// truth is what the CFI says about the return address at one PC.
type truth int

const (
	truthSlot0 truth = iota // CFA = rsp+8: return address at [SP]
	truthSlot8              // CFA = rsp+16 with no frame set up: at [SP+8]
	truthFrame              // CFA defined by rbp: the FP walk is right
	truthNone               // anything else: not capturable from two words
)

func (t truth) String() string {
	return [...]string{"slot0", "slot8", "frame", "none"}[t]
}

// observedTruth is what a Go program's registers showed at each PC where
// its CFI alone does not say whether the function has set up its frame.
type observedTruth struct {
	at map[uint64]truth
	// inconsistent counts PCs seen with two different truths: none is
	// kept for them.
	inconsistent int
	steps        int
}

type cfiRow struct {
	loc uint64
	cfa string
	ra  string // "u" marks an outermost frame (_start): nothing to return to
}

// fde is one CFI range with its rows (sorted by loc). When readelf prints
// no table the CIE's initial rule holds for the whole range.
type fde struct {
	lo, hi uint64
	rows   []cfiRow
}

func (f *fde) cfaAt(pc uint64) string {
	i := sort.Search(len(f.rows), func(i int) bool { return f.rows[i].loc > pc })
	if i == 0 {
		return ""
	}
	return f.rows[i-1].cfa
}

var (
	cieHeader = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE`)
	fdeHeader = regexp.MustCompile(`^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	cfiRowRe  = regexp.MustCompile(`^([0-9a-f]{8,16}) (\S+)`)
	insnLine  = regexp.MustCompile(`^\s+([0-9a-f]+):\t(.*)$`)
)

// readCFI parses `readelf --debug-dump=frames-interp`.
func readCFI(t *testing.T, bin string) []*fde {
	t.Helper()
	out := tool(t, "readelf", "-wF", bin)
	cieInitial := map[string]cfiRow{}
	var columns []string
	var fdes []*fde
	var curCIE string
	var cur *fde
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := cieHeader.FindStringSubmatch(line); m != nil {
			curCIE, cur = m[1], nil
			continue
		}
		if m := fdeHeader.FindStringSubmatch(line); m != nil {
			lo, _ := strconv.ParseUint(m[2], 16, 64)
			hi, _ := strconv.ParseUint(m[3], 16, 64)
			cur, curCIE = &fde{lo: lo, hi: hi}, ""
			if init, ok := cieInitial[m[1]]; ok {
				init.loc = lo
				cur.rows = []cfiRow{init}
			}
			fdes = append(fdes, cur)
			continue
		}
		if strings.TrimSpace(line) == "" {
			// Tables end at a blank line; "ZERO terminator" lines follow.
			cur, curCIE = nil, ""
			continue
		}
		if f := strings.Fields(line); len(f) > 1 && f[0] == "LOC" {
			columns = f
			continue
		}
		m := cfiRowRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		loc, _ := strconv.ParseUint(m[1], 16, 64)
		row := cfiRow{loc: loc, cfa: m[2]}
		if f, i := strings.Fields(line), slices.Index(columns, "ra"); len(f) == len(columns) && i >= 0 {
			row.ra = f[i]
		}
		switch {
		case cur != nil:
			if len(cur.rows) > 0 && cur.rows[len(cur.rows)-1].loc == loc {
				cur.rows[len(cur.rows)-1] = row
			} else {
				cur.rows = append(cur.rows, row)
			}
		case curCIE != "":
			if _, ok := cieInitial[curCIE]; !ok {
				cieInitial[curCIE] = row
			}
		}
	}
	if len(fdes) == 0 {
		t.Fatalf("no FDEs in readelf output for %s", bin)
	}
	return fdes
}

type insn struct {
	addr uint64
	text string
}

// readInstructions lists every instruction objdump decodes in executable sections.
func readInstructions(t *testing.T, bin string) []insn {
	t.Helper()
	out := tool(t, "objdump", "-d", "-M", "intel", "--no-show-raw-insn", bin)
	var insns []insn
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := insnLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		a, _ := strconv.ParseUint(m[1], 16, 64)
		insns = append(insns, insn{addr: a, text: strings.Join(strings.Fields(m[2]), " ")})
	}
	sort.Slice(insns, func(i, j int) bool { return insns[i].addr < insns[j].addr })
	return insns
}

func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, name), args...).Output()
	// readelf exits 1 on some system libraries after printing everything.
	if err != nil && len(out) == 0 {
		t.Fatalf("running %s %v: %v", name, args, err)
	}
	return out
}

// image gives the bytes at virtual addresses of an ELF file.
type image struct {
	f *elf.File
}

func (im image) bytes(t *testing.T, lo, hi uint64) []byte {
	t.Helper()
	for _, s := range im.f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || lo < s.Addr || hi > s.Addr+s.Size {
			continue
		}
		data, err := s.Data()
		if err != nil {
			t.Fatalf("reading section %s: %v", s.Name, err)
		}
		return data[lo-s.Addr : hi-s.Addr]
	}
	return nil
}

// symbolNames maps function start addresses to names (for messages and
// per-function checks).
func symbolNames(f *elf.File) map[uint64]string {
	names := map[uint64]string{}
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			if _, ok := names[s.Value]; !ok {
				names[s.Value] = s.Name
			}
		}
	}
	return names
}

// tally counts the comparisons for one binary.
type tally struct {
	agreeSlot, agreeFalse, conservative, wrong int
	unreached                                  int // conservative PCs with no direct path from entry
	noCFI, notCallEntered, incompleteCFI       int
	fdes                                       int // FDEs read, skipped ones included
	unobserved                                 int // Go PCs whose truth no run showed
	missedFlow                                 int // conservative PCs objdump's flow reaches and the analysis did not
	stackSwitching                             int // functions refused as a whole
	byFunc                                     map[string]*funcTally
}

type funcTally struct {
	pcs, slot0, conservative int
}

func (c tally) String() string {
	return fmt.Sprintf("agree=%d (slot %d, false %d) conservative-false=%d (%d unreached from entry by objdump's flow, %d reached by it and not by the analysis) wrong=%d; %d stack-switching functions refused; skipped: %d PCs without CFI, %d of %d FDEs not entered by call, %d FDEs whose CFI ignores pushes, %d Go PCs unobserved",
		c.agreeSlot+c.agreeFalse, c.agreeSlot, c.agreeFalse, c.conservative, c.unreached, c.missedFlow, c.wrong, c.stackSwitching, c.noCFI, c.notCallEntered, c.fdes, c.incompleteCFI, c.unobserved)
}

// compareWithCFI checks ReturnAddressSlot at every instruction of every
// call-entered FDE of bin. For a Go binary, whose CFI never describes RBP,
// observed gives the truth where the CFA is RSP-based beyond rsp+8 (from
// the registers of the running program, traceGoTruth); such PCs it did not
// see are counted as unobserved and left out.
func compareWithCFI(t *testing.T, bin string, observed *observedTruth) tally {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("opening %s: %v", bin, err)
	}
	defer ef.Close()
	im := image{ef}
	names := symbolNames(ef)
	insns := readInstructions(t, bin)
	c := tally{byFunc: map[string]*funcTally{}}
	wrongShown := 0
	for _, fd := range readCFI(t, bin) {
		c.fdes++
		lo := sort.Search(len(insns), func(i int) bool { return insns[i].addr >= fd.lo })
		hi := sort.Search(len(insns), func(i int) bool { return insns[i].addr >= fd.hi })
		if lo == hi {
			continue
		}
		if fd.cfaAt(fd.lo) != "rsp+8" || fd.rows[0].ra == "u" {
			// PLT stubs and .cold fragments are entered by jmp, _start by
			// the kernel.
			c.notCallEntered++
			continue
		}
		if len(fd.rows) == 1 && pushesWithoutCFI(insns[lo:hi]) {
			// Hand-written assembly whose CFI omits its pushes (seen in
			// libc's mpn routines): the CFI is no truth there.
			c.incompleteCFI++
			continue
		}
		code := im.bytes(t, fd.lo, fd.hi)
		if code == nil {
			t.Fatalf("%s: no bytes for FDE %#x..%#x", bin, fd.lo, fd.hi)
		}
		fn := Analyze(code, fd.lo)
		flow := directFlow(insns[lo:hi], fd.lo, fd.hi)
		reached, switches := explore(code)
		if switches {
			c.stackSwitching++
		}
		name := names[fd.lo]
		if name == "" {
			name = fmt.Sprintf("fde@%#x", fd.lo)
		}
		ft := &funcTally{}
		c.byFunc[name] = ft
		for _, in := range insns[lo:hi] {
			cfa := fd.cfaAt(in.addr)
			if cfa == "" {
				c.noCFI++
				continue
			}
			var want truth
			switch {
			case cfa == "rsp+8":
				want = truthSlot0
			case observed != nil:
				w, seen := observed.at[in.addr]
				if !seen {
					c.unobserved++
					continue
				}
				want = w
			case cfa == "rsp+16":
				want = truthSlot8
			case strings.HasPrefix(cfa, "rbp+"):
				want = truthFrame
			default:
				want = truthNone
			}
			slot, ok := fn.ReturnAddressSlot(in.addr)
			// The package-level function must agree with the cached analysis.
			if in.addr == fd.lo {
				if s2, ok2 := ReturnAddressSlot(code, fd.lo, in.addr); s2 != slot || ok2 != ok {
					t.Errorf("%s %s %#x: ReturnAddressSlot=(%d,%v) but Analyze gives (%d,%v)", bin, name, in.addr, s2, ok2, slot, ok)
				}
			}
			ft.pcs++
			switch {
			case ok && ((want == truthSlot0 && slot == 0) || (want == truthSlot8 && slot == 8)):
				c.agreeSlot++
				if slot == 0 {
					ft.slot0++
				}
			case ok:
				c.wrong++
				if wrongShown++; wrongShown <= 30 {
					t.Errorf("%s: %s+%#x (%#x) %q: got slot %d, CFA %s says %s", bin, name, in.addr-fd.lo, in.addr, in.text, slot, cfa, want)
				}
			case want == truthSlot0 || want == truthSlot8:
				c.conservative++
				ft.conservative++
				if !flow[in.addr] {
					// Jump-table targets, padding: no direct path from
					// entry in objdump's instructions, independently of
					// the analysis (whose own exploration must reach
					// whatever objdump's does, or the PC counts against
					// it).
					c.unreached++
				} else if _, seen := reached[uint32(in.addr-fd.lo)]; !seen {
					c.missedFlow++
				}
				// UNWIND_SHOW_CONSERVATIVE=1 lists the refused PCs.
				if os.Getenv("UNWIND_SHOW_CONSERVATIVE") != "" {
					t.Logf("conservative: %s+%#x %q CFA %s", name, in.addr-fd.lo, in.text, cfa)
				}
			default:
				c.agreeFalse++
			}
			if in.addr == fd.lo && !switches && (!ok || slot != 0) {
				t.Errorf("%s: entry of %s (%#x): got (%d,%v), want (0,true)", bin, name, in.addr, slot, ok)
			}
			if (in.text == "ret" || strings.HasPrefix(in.text, "ret ")) && (!ok || slot != 0) {
				t.Errorf("%s: ret in %s at %#x: got (%d,%v), want (0,true)", bin, name, in.addr, slot, ok)
			}
		}
	}
	return c
}

// directFlow returns the instructions of insns (one FDE, [lo, hi)) that
// direct control flow reaches from lo, by objdump's decoding: fall
// through, both ways of a conditional jump, a direct jump's target inside
// the range; nothing after an indirect jump, a return, ud2 or hlt. A call
// returns.
func directFlow(insns []insn, lo, hi uint64) map[uint64]bool {
	index := make(map[uint64]int, len(insns))
	for i, in := range insns {
		index[in.addr] = i
	}
	reached := map[uint64]bool{}
	work := []uint64{lo}
	for len(work) > 0 {
		pc := work[len(work)-1]
		work = work[:len(work)-1]
		i, ok := index[pc]
		if !ok || reached[pc] {
			continue
		}
		reached[pc] = true
		f := strings.Fields(insns[i].text)
		for len(f) > 1 && (f[0] == "bnd" || f[0] == "notrack" || f[0] == "rep" || f[0] == "repz" || f[0] == "ds" || f[0] == "cs") {
			f = f[1:]
		}
		op := ""
		if len(f) > 0 {
			op = f[0]
		}
		next := func() {
			if i+1 < len(insns) {
				work = append(work, insns[i+1].addr)
			}
		}
		switch {
		case strings.HasPrefix(op, "ret"), op == "ud2", op == "hlt":
		case strings.HasPrefix(op, "j"):
			if op != "jmp" {
				next()
			}
			if len(f) > 1 {
				if to, err := strconv.ParseUint(f[1], 16, 64); err == nil && to >= lo && to < hi {
					work = append(work, to)
				}
			}
		default:
			next()
		}
	}
	return reached
}

// pushesWithoutCFI reports whether instructions that move RSP appear in a
// range whose CFI has a single row.
func pushesWithoutCFI(insns []insn) bool {
	for _, in := range insns {
		if strings.HasPrefix(in.text, "push ") || strings.HasPrefix(in.text, "sub rsp,") {
			return true
		}
	}
	return false
}

func TestGroundTruthC(t *testing.T) {
	builds := []struct {
		src   string
		flags []string
	}{
		{"cpuhog.c", testworkload.CPUHogFlags()},
		{"cpuhog.c", []string{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer", "-fcf-protection=full"}},
		{"prologues.c", []string{"-O2", "-fno-omit-frame-pointer", "-fcf-protection=full"}},
		{"prologues.c", []string{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"}},
		{"prologues.c", []string{"-O2", "-fomit-frame-pointer", "-fcf-protection=full"}},
		{"prologues.c", []string{"-O3", "-mavx2", "-fno-omit-frame-pointer"}},
		{"prologues.c", []string{"-Os", "-fomit-frame-pointer"}},
		{"prologues.c", []string{"-O0", "-fcf-protection=full"}},
	}
	var total tally
	for _, b := range builds {
		name := b.src + " " + strings.Join(b.flags, " ")
		t.Run(name, func(t *testing.T) {
			bin := testworkload.BuildC(t, b.src, b.flags...)
			c := compareWithCFI(t, bin, nil)
			t.Logf("%s: %v", name, c)
			checkCoverage(t, c)
			if b.src == "cpuhog.c" {
				leaf := c.byFunc["leaf"]
				if leaf == nil || leaf.pcs == 0 {
					t.Fatalf("no CFI-covered instructions for leaf")
				}
				if leaf.slot0 != leaf.pcs {
					t.Errorf("leaf: slot 0 at %d of %d PCs, want all", leaf.slot0, leaf.pcs)
				}
			}
			total.agreeSlot += c.agreeSlot
			total.agreeFalse += c.agreeFalse
			total.conservative += c.conservative
			total.wrong += c.wrong
			total.unreached += c.unreached
		})
	}
	t.Logf("all C builds: %v", total)
}

// TestGroundTruthLibc runs the comparison on the system C library, whose
// hand-written assembly has prologues no compiler emits.
func TestGroundTruthLibc(t *testing.T) {
	out := tool(t, "gcc", "-print-file-name=libc.so.6")
	lib := strings.TrimSpace(string(out))
	testenv.RequireFile(t, lib, "libc6")
	c := compareWithCFI(t, lib, nil)
	t.Logf("%s: %v", lib, c)
	checkCoverage(t, c)
}

// checkCoverage fails when the analysis is so conservative that it is useless:
// nearly every PC that is reached from the entry and whose CFI proves a slot
// must get that slot. (Unreached PCs are jump-table targets and padding.)
// What the comparison leaves out is capped, so a truth that stops seeing
// (a parse that finds no flow, FDEs all skipped) fails instead of passing
// on what is left: PCs no direct flow reaches at most 30% of those with a
// provable slot (23% measured in the worst build, 19% in libc); FDEs not
// entered by call at most 5% of them, or 3 (crt's _start and the PLT in a
// small program); FDEs whose CFI ignores pushes at most 1% (3 of 3713 in
// libc).
func checkCoverage(t *testing.T, c tally) {
	t.Helper()
	provable := c.agreeSlot + c.conservative - c.unreached + c.wrong
	if provable == 0 {
		t.Fatalf("no instruction with a provable slot was checked")
	}
	if c.agreeSlot*100 < provable*95 {
		t.Errorf("answered %d of %d reached PCs with a provable slot, want at least 95%%", c.agreeSlot, provable)
	}
	if withSlot := c.agreeSlot + c.conservative + c.wrong; c.unreached*100 > withSlot*30 {
		t.Errorf("%d of %d PCs with a provable slot left out as unreached by direct flow, want at most 30%%", c.unreached, withSlot)
	}
	if c.notCallEntered > max(3, c.fdes*5/100) {
		t.Errorf("%d of %d FDEs left out as not entered by call, want at most 5%% (or 3)", c.notCallEntered, c.fdes)
	}
	if c.incompleteCFI*100 > c.fdes {
		t.Errorf("%d of %d FDEs left out as CFI that ignores pushes, want at most 1%%", c.incompleteCFI, c.fdes)
	}
	// An instruction of an FDE with no CFA rule at it: the table has no
	// truth there.
	if checked := c.agreeSlot + c.agreeFalse + c.conservative + c.wrong + c.noCFI; c.noCFI*100 > checked {
		t.Errorf("%d of %d PCs left out with no CFA rule, want at most 1%%", c.noCFI, checked)
	}
}
