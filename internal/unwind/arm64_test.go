package unwind

import (
	"debug/elf"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// arm64Tally counts, over the instructions of every FDE, how the analysis
// agrees with the CFI.
type arm64Tally struct {
	inLink, found int // PCs whose return address the CFI keeps in x30; of those, answered slot 0
	unreached     int // in-link PCs the analysis did not reach
	savedAnswered int // PCs where the CFI has x30 saved and x30 still holds it, answered slot 0
	wrong         int // answered slot 0 where x30 holds something else, or with the CFA on x29
	examples      []string
}

// arm64Insn is one instruction as objdump prints it.
var arm64Insn = regexp.MustCompile(`^\s*([0-9a-f]+):\s+[0-9a-f]{8}\s+(\S+)\s*([^/<]*)`)

// objdumpInsn is an instruction as objdump reads it: what it does to x30,
// and where it may go next.
type objdumpInsn struct {
	reload, clobber bool   // x30 reloaded from the stack; overwritten otherwise
	target          uint64 // a direct branch's target, 0 if none
	falls           bool   // execution may go on to the next instruction
}

// readARM64 reads objdump's disassembly of bin.
func readARM64(t *testing.T, bin string) map[uint64]objdumpInsn {
	t.Helper()
	out := map[uint64]objdumpInsn{}
	for _, line := range strings.Split(string(tool(t, "aarch64-linux-gnu-objdump", "-d", bin)), "\n") {
		m := arm64Insn.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a, _ := strconv.ParseUint(m[1], 16, 64)
		op, args := m[2], strings.Split(strings.TrimSpace(m[3]), ", ")
		in := objdumpInsn{falls: true}
		dsts := args[:1]
		if op == "ldp" {
			dsts = args[:min(2, len(args))]
		}
		switch {
		case op == "bl" || op == "blr":
			in.clobber = true
		case op == "ret" || op == "br" || op == "brk" || op == "hlt" || op == "udf":
			in.falls = false
		case op == "b" || strings.HasPrefix(op, "b.") || op == "cbz" || op == "cbnz" || op == "tbz" || op == "tbnz":
			in.falls = op != "b"
			in.target, _ = strconv.ParseUint(strings.TrimSpace(args[len(args)-1]), 16, 64)
		case strings.HasPrefix(op, "st") || strings.HasPrefix(op, "cmp") || strings.HasPrefix(op, "tst"):
		case slices.Contains(dsts, "x30") && (op == "ldp" || op == "ldr") && strings.Contains(m[3], "[sp"):
			in.reload = true
		case slices.Contains(dsts, "x30"):
			in.clobber = true
		}
		out[a] = in
	}
	return out
}

// mayClobber follows the direct control flow of the function [lo, hi) as
// objdump reads it, and returns the instructions before which x30 may no
// longer hold the return address: on some path from the entry, a call or
// another write overwrote it since the entry or its last reload. The entry
// itself is always entered holding it (a branch back there, such as Go's
// morestack tail, calls the function again).
func mayClobber(insns map[uint64]objdumpInsn, lo, hi uint64) map[uint64]bool {
	clobbered := map[uint64]bool{}
	seen := map[uint64]bool{lo: true}
	work := []uint64{lo}
	visit := func(pc uint64, c bool) {
		if pc < lo || pc >= hi || pc == lo || (seen[pc] && (clobbered[pc] || !c)) {
			return
		}
		seen[pc] = true
		clobbered[pc] = clobbered[pc] || c
		work = append(work, pc)
	}
	for len(work) > 0 {
		pc := work[len(work)-1]
		work = work[:len(work)-1]
		in, ok := insns[pc]
		if !ok {
			continue
		}
		c := (clobbered[pc] || in.clobber) && !in.reload
		if in.falls {
			visit(pc+4, c)
		}
		if in.target != 0 {
			visit(in.target, c)
		}
	}
	return clobbered
}

// raUndefined returns the rows (by address) where llvm-dwarfdump says x30
// is undefined: a thread's outermost frame, which readelf prints as "u"
// like a register with no rule.
func raUndefined(t *testing.T, bin string) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	row := regexp.MustCompile(`^  0x([0-9a-f]+): CFA=.*W30=undefined`)
	for _, line := range strings.Split(string(tool(t, testenv.LookPath(t, "llvm-dwarfdump-14", "llvm-dwarfdump"), "--eh-frame", bin)), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			a, _ := strconv.ParseUint(m[1], 16, 64)
			out[a] = true
		}
	}
	return out
}

// compareARM64 analyses every function of the arm64 binary bin that an FDE
// covers, and checks each instruction's answer against readelf's reading
// of the CFI and objdump's of the code:
//   - where the CFI keeps the return address in x30 (no rule for it, or
//     Go's "same value") and no instruction overwrote x30 (hand-written
//     assembly's CFI may not say so), the caller is in the link
//     register: slot 0 is the answer;
//   - slot 0 may be answered only where x30 still holds the return
//     address on every path from the entry that objdump's reading of the
//     branches gives (mayClobber), and never where the CFA is computed
//     from x29.
func compareARM64(t *testing.T, bin string) arm64Tally {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	insns := readARM64(t, bin)
	undefined := raUndefined(t, bin)
	im := image{f}
	var c arm64Tally
	for _, fd := range readCFI(t, bin) {
		code := im.bytes(t, fd.lo, fd.hi)
		// An FDE entered by a call starts with x30 holding the return
		// address and the CFA at SP: the function's entry.
		if code == nil || len(fd.rows) == 0 || fd.rows[0].cfa != "sp+0" || !inLink(fd.rows[0]) || undefined[fd.rows[0].loc] {
			continue
		}
		fn := analyzeARM64(code, fd.lo)
		clobbered := mayClobber(insns, fd.lo, fd.hi)
		for pc := fd.lo; pc < fd.hi; pc += 4 {
			x30 := !clobbered[pc]
			row := fd.rows[0]
			for _, r := range fd.rows {
				if r.loc <= pc {
					row = r
				}
			}
			slot, ok := fn.ReturnAddressSlot(pc)
			answered := ok && slot == 0
			switch {
			case inLink(row) && !undefined[row.loc] && !x30:
				// Hand-written code that writes x30 where its CFI does
				// not say so, or Go's morestack tail after its call.
			case inLink(row) && !undefined[row.loc] && strings.HasPrefix(row.cfa, "sp"):
				c.inLink++
				if answered {
					c.found++
				} else if _, reached := fn.stateAt(pc); !reached {
					c.unreached++
				} else if len(c.examples) < 5 {
					c.examples = append(c.examples, fmt.Sprintf("%#x (function at %#x): no answer with CFA %s, ra %q", pc, fd.lo, row.cfa, row.ra))
				}
			case answered && (!x30 || strings.HasPrefix(row.cfa, "x29")):
				c.wrong++
				if len(c.examples) < 5 {
					c.examples = append(c.examples, fmt.Sprintf("%#x (function at %#x): slot 0 with CFA %s, ra %q, x30 overwritten: %v", pc, fd.lo, row.cfa, row.ra, !x30))
				}
			case answered:
				c.savedAnswered++
			}
		}
	}
	return c
}

// inLink tells whether the CFI keeps the return address in x30 in row: no
// rule for it (readelf's "u", or no column in a CIE's row), or Go's "same
// value" ("s").
func inLink(row cfiRow) bool { return row.ra == "u" || row.ra == "" || row.ra == "s" }

// stateAt reports whether the analysis reached the instruction at pc.
func (f *Function) stateAt(pc uint64) (int8, bool) {
	for i, off := range f.offsets {
		if f.start+uint64(off) == pc {
			return f.slots[i], true
		}
	}
	return -1, false
}

func checkARM64(t *testing.T, name string, c arm64Tally) {
	t.Helper()
	t.Logf("%s: x30 holds the return address at %d PCs, answered at %d (%d unreached); %d answered where x30 is saved and still holds it; %d wrong",
		name, c.inLink, c.found, c.unreached, c.savedAnswered, c.wrong)
	if c.wrong > 0 {
		t.Errorf("%s: %d wrong answers; some disagreements: %v", name, c.wrong, c.examples)
	}
	if c.inLink == 0 {
		t.Fatalf("%s: no instruction with the return address in x30", name)
	}
	if share := float64(c.found) / float64(c.inLink-c.unreached); share < 0.99 {
		t.Errorf("%s: slot 0 at %.1f%% of the reached PCs whose return address is in x30, want 99%%; some disagreements: %v", name, 100*share, c.examples)
	}
}

// TestARM64AgreesWithCFI checks the arm64 analysis on cross-built C
// workloads, Debian's arm64 C library and a Go program, against their CFI.
func TestARM64AgreesWithCFI(t *testing.T) {
	testenv.LookPath(t, "aarch64-linux-gnu-gcc")
	builds := []testworkload.Workload{
		{Compiler: testworkload.GCC, Name: "cpuhog.c", Flags: []string{"-O2", "-g", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"}},
		{Compiler: testworkload.GCC, Name: "prologues.c", Flags: []string{"-O2", "-fno-omit-frame-pointer"}},
		{Compiler: testworkload.GCC, Name: "prologues.c", Flags: []string{"-O2", "-fomit-frame-pointer"}},
		{Compiler: testworkload.GCC, Name: "prologues.c", Flags: []string{"-Os"}},
		{Compiler: testworkload.GCC, Name: "prologues.c", Flags: []string{"-O0"}},
		{Compiler: testworkload.Go, Name: "gohog"},
	}
	for _, w := range builds {
		name := w.Name + " " + strings.Join(w.Flags, " ")
		t.Run(name, func(t *testing.T) {
			bin, err := testworkload.Compile(w, testworkload.ARM64Toolchain, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			checkARM64(t, name, compareARM64(t, bin))
		})
	}
	t.Run("libc", func(t *testing.T) {
		lib := "/usr/aarch64-linux-gnu/lib/libc.so.6"
		testenv.RequireFile(t, lib, "libc6-arm64-cross")
		checkARM64(t, "libc", compareARM64(t, lib))
	})
}
