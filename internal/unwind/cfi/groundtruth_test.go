package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ground truth is readelf's interpretation of the CFI
// (--debug-dump=frames-interp): for every FDE, the rows of the unwind
// table with the CFA rule and every register's rule. readelf prints "exp"
// for a CFA expression, so the expression itself is taken from
// llvm-dwarfdump's rows. (llvm-dwarfdump 14 alone is no ground truth: its
// DW_CFA_restore_state does not restore the CFA.)

var (
	reRECIE    = regexp.MustCompile(`^([0-9a-f]{8,16}) [0-9a-f]+ [0-9a-f]+ CIE "([^"]*)"`)
	reREFDE    = regexp.MustCompile(`^([0-9a-f]{8,16}) [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	reREHeader = regexp.MustCompile(`^\s+LOC\s+CFA\s*(.*)$`)
	reRERow    = regexp.MustCompile(`^([0-9a-f]{16}) (.*)$`)
	reLLFDE    = regexp.MustCompile(`^[0-9a-f]{8,16} [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=[0-9a-f]+\.\.\.[0-9a-f]+`)
	reLLRow    = regexp.MustCompile(`^  0x([0-9a-f]+): CFA=(.*?)(?:: (.*))?$`)
	reRECell   = regexp.MustCompile(`r\d+ \([a-z0-9]+\)|\S+`)
	reCFAReg   = regexp.MustCompile(`^(rsp|rbp|sp|x29)([+-]\d+)$`)
	rePLT      = regexp.MustCompile(`^DW_OP_breg7 RSP([+-]\d+), DW_OP_breg16 RIP\+0, DW_OP_lit15, DW_OP_and, DW_OP_lit(\d+), DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus$`)
	reAtCFA    = regexp.MustCompile(`^c([+-]\d+)$`)
)

// truthNames are the names readelf and llvm-dwarfdump give the registers
// of one architecture.
type truthNames struct {
	sp       string // the stack pointer, readelf's
	fp, llFP string // the frame pointer: readelf's column, llvm-dwarfdump's name
	llRA     string // the return address column, llvm-dwarfdump's name
	raInLink bool   // a return address with no rule is in the link register
}

var (
	namesX86_64 = truthNames{sp: "rsp", fp: "rbp", llFP: "RBP", llRA: "RIP"}
	namesARM64  = truthNames{sp: "sp", fp: "x29", llFP: "W29", llRA: "W30", raInLink: true}
)

// namesOf returns the register names of f's architecture.
func namesOf(f *elf.File) truthNames {
	if f.Machine == elf.EM_AARCH64 {
		return namesARM64
	}
	return namesX86_64
}

type truthRow struct {
	pc  uint64
	row Row // the rule that the tools' row means, in our terms
}

type truthFDE struct {
	begin, end uint64
	rows       []truthRow
}

// groundTruth returns the FDEs of path's .eh_frame or .debug_frame (debug
// true) as readelf and llvm-dwarfdump interpret them.
func groundTruth(t *testing.T, path string, debug bool, names truthNames) []truthFDE {
	t.Helper()
	reFlag, llFlag, reSection, llSection := "--debug-dump=frames-interp", "--eh-frame", ".eh_frame", ".eh_frame"
	if debug {
		llFlag, reSection, llSection = "--debug-frame", ".debug_frame", ".debug_frame"
	}
	exprs, fpUndefined, raUndefined := llvmRows(t, path, llFlag, llSection, names)

	out, err := exec.Command("readelf", reFlag, path).Output()
	if !bytes.Contains(out, []byte("Contents of the "+reSection+" section")) {
		// readelf exits 1 on some files (libc) after printing everything;
		// only missing output is a failure.
		require.NoError(t, err, "readelf %s %s", reFlag, path)
		require.FailNow(t, "readelf printed no "+reSection, path)
	}
	type cieInfo struct {
		signal bool
		row    *truthRow
	}
	cies := map[string]*cieInfo{}
	var fdes []truthFDE
	var cur *truthFDE
	var curCIE *cieInfo
	var cols []string
	signal := false
	in := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the ") {
			in = strings.HasPrefix(line, "Contents of the "+reSection+" section")
			cur, curCIE = nil, nil
			continue
		}
		if !in {
			continue
		}
		switch {
		case reRECIE.MatchString(line):
			m := reRECIE.FindStringSubmatch(line)
			curCIE = &cieInfo{signal: strings.Contains(m[2], "S")}
			cies[m[1]] = curCIE
			cur = nil
		case reREFDE.MatchString(line):
			m := reREFDE.FindStringSubmatch(line)
			begin, _ := strconv.ParseUint(m[3], 16, 64)
			end, _ := strconv.ParseUint(m[4], 16, 64)
			c := cies[m[2]]
			require.NotNil(t, c, "FDE of unknown CIE: %s", line)
			fdes = append(fdes, truthFDE{begin: begin, end: end})
			cur, curCIE = &fdes[len(fdes)-1], nil
			signal = c.signal
			// An FDE with no instructions prints no row: the CIE's
			// initial row holds.
			if c.row != nil {
				cur.rows = append(cur.rows, truthRow{pc: begin, row: c.row.row})
			}
		case reREHeader.MatchString(line):
			cols = strings.Fields(reREHeader.FindStringSubmatch(line)[1])
		case reRERow.MatchString(line) && (cur != nil || curCIE != nil):
			m := reRERow.FindStringSubmatch(line)
			pc, _ := strconv.ParseUint(m[1], 16, 64)
			f := reRECell.FindAllString(m[2], -1)
			require.Len(t, f, len(cols)+1, "readelf row %q", line)
			rules := map[string]string{}
			for i, c := range cols {
				rules[c] = f[i+1]
			}
			// readelf prints "u" both for a register with no rule yet
			// and for DW_CFA_undefined; llvm-dwarfdump tells them apart.
			if rules[names.fp] == "u" && !fpUndefined[pc] {
				delete(rules, names.fp)
			}
			if rules["ra"] == "u" && names.raInLink && !raUndefined[pc] {
				delete(rules, "ra")
			}
			cfa := f[0]
			if cfa == "exp" {
				cfa = exprs[pc]
			}
			if curCIE != nil {
				curCIE.row = &truthRow{pc: pc, row: truthRule(cfa, rules, curCIE.signal, names)}
				continue
			}
			cur.rows = append(cur.rows, truthRow{pc: pc, row: truthRule(cfa, rules, signal, names)})
		}
	}
	require.NoError(t, sc.Err())
	return fdes
}

// llvmRows returns, by address, the CFA expressions llvm-dwarfdump prints
// and where it says the frame pointer and the return address are
// undefined.
func llvmRows(t *testing.T, path, flag, section string, names truthNames) (exprs map[uint64]string, fpUndefined, raUndefined map[uint64]bool) {
	t.Helper()
	tool := "llvm-dwarfdump-14"
	if _, err := exec.LookPath(tool); err != nil {
		tool = "llvm-dwarfdump"
	}
	out, err := exec.Command(tool, flag, path).Output()
	require.NoError(t, err, "%s %s %s", tool, flag, path)
	exprs, fpUndefined, raUndefined = map[uint64]string{}, map[uint64]bool{}, map[uint64]bool{}
	in, inFDE := false, false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, " contents:"):
			in = strings.HasPrefix(line, section)
		case !in:
		case reLLFDE.MatchString(line):
			inFDE = true
		case strings.Contains(line, " CIE"):
			inFDE = false
		case inFDE && reLLRow.MatchString(line):
			m := reLLRow.FindStringSubmatch(line)
			pc, _ := strconv.ParseUint(m[1], 16, 64)
			if strings.HasPrefix(m[2], "DW_OP") {
				exprs[pc] = m[2]
			}
			if strings.Contains(", "+m[3]+",", ", "+names.llFP+"=undefined,") {
				fpUndefined[pc] = true
			}
			if strings.Contains(", "+m[3]+",", ", "+names.llRA+"=undefined,") {
				raUndefined[pc] = true
			}
		}
	}
	require.NoError(t, sc.Err())
	return exprs, fpUndefined, raUndefined
}

// truthRule converts readelf's CFA and register rules.
func truthRule(cfa string, rules map[string]string, signal bool, names truthNames) Row {
	if signal {
		return Row{CFA: CFASignal}
	}
	var r Row
	ra, saved := rules["ra"]
	switch {
	case ra == "u":
		return Row{CFA: CFAEnd}
	case ra == "c-8":
		r.RA = RACallSlot
	case !saved && names.raInLink:
		r.RA = RAInLink
	case reAtCFA.MatchString(ra) && names.raInLink:
		off, _ := strconv.ParseInt(reAtCFA.FindStringSubmatch(ra)[1], 10, 32)
		r.RA, r.RAOffset = RAAtCFA, int32(off)
	default:
		return Row{CFA: CFAUnsupported}
	}
	if m := reCFAReg.FindStringSubmatch(cfa); m != nil {
		off, _ := strconv.ParseInt(m[2], 10, 32)
		r.CFA, r.CFAOffset = CFASP, int32(off)
		switch m[1] {
		case names.sp:
		case names.fp:
			r.CFA = CFAFP
		default:
			return Row{CFA: CFAUnsupported}
		}
	} else if m := rePLT.FindStringSubmatch(cfa); m != nil {
		off, _ := strconv.ParseInt(m[1], 10, 32)
		th, _ := strconv.ParseUint(m[2], 10, 8)
		r.CFA, r.CFAOffset, r.PLTThreshold = CFAPLT, int32(off), uint8(th)
	} else {
		return Row{CFA: CFAUnsupported}
	}
	switch rbp, ok := rules[names.fp]; {
	case !ok || rbp == "s":
		r.FP = FPUnchanged
	case reAtCFA.MatchString(rbp):
		off, _ := strconv.ParseInt(reAtCFA.FindStringSubmatch(rbp)[1], 10, 32)
		r.FP, r.FPOffset = FPAtCFA, int32(off)
	default:
		r.FP = FPUnsupported
	}
	return r
}

// agreement is the outcome of comparing a table with the ground truth.
type agreement struct {
	checked, mismatched int
	overlapping         int             // points two or more FDEs cover
	byRule              map[CFARule]int // checked points by expected rule
	byRA                map[RARule]int  // checked points by expected return address rule
	examples            []string
}

// compare checks tbl against the ground truth at every row boundary of
// both: at each row of every FDE, at each of our rows, and right after
// each FDE. Where FDEs overlap (the CFI gives two rules for one address),
// either FDE's rule is right: the truth does not choose one the way the
// compiler does. Where none covers an address, the table must have no
// rule.
func compare(tbl *Table, fdes []truthFDE, ranges []Range) agreement {
	a := agreement{byRule: map[CFARule]int{}, byRA: map[RARule]int{}}
	inExec := func(begin, end uint64) bool {
		for _, r := range ranges {
			if r.Start <= begin && end <= r.End {
				return true
			}
		}
		return len(ranges) == 0
	}
	var sel []truthFDE
	for _, f := range fdes {
		if f.end > f.begin && inExec(f.begin, f.end) {
			sel = append(sel, f)
		}
	}
	slices.SortStableFunc(sel, func(x, y truthFDE) int { return cmpU64(x.begin, y.begin) })
	// reach[i] is the highest end among sel[:i+1]: how far back an
	// FDE covering an address may begin.
	reach := make([]uint64, len(sel))
	for i, f := range sel {
		reach[i] = f.end
		if i > 0 {
			reach[i] = max(reach[i], reach[i-1])
		}
	}
	ruleAt := func(f truthFDE, pc uint64) Row {
		var r Row
		for _, tr := range f.rows {
			if tr.pc <= pc {
				r = tr.row
			}
		}
		return r
	}
	// rulesAt returns the rules of every FDE covering pc.
	rulesAt := func(pc uint64) []Row {
		var rows []Row
		i, _ := slices.BinarySearchFunc(sel, pc+1, func(f truthFDE, x uint64) int { return cmpU64(f.begin, x) })
		for j := i - 1; j >= 0 && reach[j] > pc; j-- {
			if sel[j].begin <= pc && pc < sel[j].end {
				rows = append(rows, ruleAt(sel[j], pc))
			}
		}
		return rows
	}
	check := func(pc uint64) {
		got, _ := tbl.Lookup(pc)
		want := rulesAt(pc)
		if len(want) == 0 {
			want = []Row{{CFA: CFANone}}
		}
		if len(want) > 1 {
			a.overlapping++
		}
		a.checked++
		a.byRule[want[0].CFA]++
		if c := want[0].CFA; c == CFASP || c == CFAFP || c == CFAPLT {
			a.byRA[want[0].RA]++
		}
		if !slices.ContainsFunc(want, func(w Row) bool { return sameRule(got, w) }) {
			a.mismatched++
			if len(a.examples) < 10 {
				a.examples = append(a.examples, fmt.Sprintf("at %#x: got %+v, want %+v", pc, got, want))
			}
		}
	}
	for _, f := range sel {
		for _, tr := range f.rows {
			if tr.pc >= f.begin && tr.pc < f.end {
				check(tr.pc)
			}
		}
		check(f.end)
	}
	for _, r := range tbl.Rows {
		check(r.PC)
	}
	return a
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkFile compiles path and compares it with llvm-dwarfdump. It returns
// the agreement for the report.
func checkFile(t *testing.T, path string, debug bool, compileFn func(*elf.File) (*Table, error), maxUnsupported float64) agreement {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tbl, err := compileFn(f)
	require.NoError(t, err)
	require.NotEmpty(t, tbl.Rows)
	checkSorted(t, tbl)

	fdes := groundTruth(t, path, debug, namesOf(f))
	require.NotEmpty(t, fdes, "readelf printed no FDE")
	flag := ".eh_frame"
	if debug {
		flag = ".debug_frame"
	}
	a := compare(tbl, fdes, ExecRanges(f))
	t.Logf("%s %s: %d rows (%d bytes at 8 B/row), %d FDEs; %d points checked (%d covered by overlapping FDEs), %d mismatched; by expected rule: %v; return address: %v",
		filepath.Base(path), flag, len(tbl.Rows), 8*len(tbl.Rows), len(fdes), a.checked, a.overlapping, a.mismatched, a.byRule, a.byRA)
	require.Greater(t, a.checked, len(fdes))
	require.Zero(t, a.mismatched, "disagreements with readelf:\n%s", strings.Join(a.examples, "\n"))
	unsupported := float64(a.byRule[CFAUnsupported]) / float64(a.checked)
	require.LessOrEqual(t, unsupported, maxUnsupported, "share of CFI rows the unwinder cannot follow")
	return a
}

// checkSorted asserts the table invariants: sorted, strictly increasing,
// adjacent rows differ, offsets zero where unused.
func checkSorted(t testing.TB, tbl *Table) {
	t.Helper()
	for i, r := range tbl.Rows {
		if i > 0 {
			require.Greater(t, r.PC, tbl.Rows[i-1].PC, "row %d", i)
			require.False(t, sameRule(r, tbl.Rows[i-1]), "rows %d and %d hold the same rule", i-1, i)
		}
		switch r.CFA {
		case CFASP, CFAFP, CFAPLT:
		default:
			require.Zero(t, r.CFAOffset, "row %d", i)
			require.Equal(t, FPUnchanged, r.FP, "row %d", i)
			require.Equal(t, RACallSlot, r.RA, "row %d", i)
		}
		if r.FP != FPAtCFA {
			require.Zero(t, r.FPOffset, "row %d", i)
		}
		if r.CFA != CFAPLT {
			require.Zero(t, r.PLTThreshold, "row %d", i)
		}
		if r.RA != RAAtCFA {
			require.Zero(t, r.RAOffset, "row %d", i)
		}
	}
	if n := len(tbl.Rows); n > 0 {
		require.Equal(t, CFANone, tbl.Rows[n-1].CFA, "the last row ends the last FDE")
	}
}

func TestGroundTruthLibc(t *testing.T) {
	checkFile(t, "/lib/x86_64-linux-gnu/libc.so.6", false, EHFrame, 0.01)
}

func TestGroundTruthPython(t *testing.T) {
	checkFile(t, requireFile(t, "/usr/bin/python3.11"), false, EHFrame, 0.01)
}

// TestGroundTruthNode checks node's table, the largest of the tests
// (~370k rows), with readelf's interpretation: TestCompileMatchesReference
// only compares it with the compiler's own row emitter.
func TestGroundTruthNode(t *testing.T) {
	checkFile(t, requireFile(t, "/usr/bin/node"), false, EHFrame, 0.01)
}

// TestGroundTruthRuntime covers the dynamic loader (hand-written
// assembly with its own CFI) and libstdc++ (C++ CIEs with personality and
// LSDA), both present wherever g++ is.
func TestGroundTruthRuntime(t *testing.T) {
	for _, p := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			checkFile(t, requireFile(t, p), false, EHFrame, 0.01)
		})
	}
}

// TestGroundTruthARM64 checks arm64's tables: Debian's cross-built C
// library, dynamic loader and C++ runtime, whose return addresses stay in
// x30 in leaves and prologues, and are saved in frame records at the top
// of the frame or lower.
func TestGroundTruthARM64(t *testing.T) {
	byRA := map[RARule]int{}
	for _, p := range []string{"/usr/aarch64-linux-gnu/lib/libc.so.6", "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1", "/usr/aarch64-linux-gnu/lib/libstdc++.so.6"} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			a := checkFile(t, requireFile(t, p), false, EHFrame, 0.01)
			for r, n := range a.byRA {
				byRA[r] += n
			}
		})
	}
	for _, r := range []RARule{RACallSlot, RAInLink, RAAtCFA} {
		require.Positive(t, byRA[r], "no row whose return address is %v: %v", r, byRA)
	}
}

func requireFile(t *testing.T, path string) string {
	t.Helper()
	_, err := os.Stat(path)
	require.NoError(t, err, "%s is installed by scripts/install-deps.sh", path)
	return path
}
