package probesite

import (
	"errors"
	"math"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// harnessFlags build the harness the way distributions build C code:
// endbr64 at every function the compiler emits (x86-64), frame pointers on.
var harnessFlags = map[string][]string{
	"amd64": {"-O2", "-fcf-protection=full", "-fno-omit-frame-pointer"},
	"arm64": {"-O2", "-fno-omit-frame-pointer"},
}[runtime.GOARCH]

// Mnemonics (as objdump prints them) the kernel emulates, and those an
// entry probe may be moved over, restated from the measured table in
// placement.go for the expectations below.
var (
	objdumpEmulated = regexp.MustCompile(`^(push\s+%r\w+|nop$|jmp\s+[0-9a-f]+ |call\s+[0-9a-f]+ |j[a-z]+\s+[0-9a-f]+ )`)
	objdumpSkip     = regexp.MustCompile(`^(endbr64|nop[lw]|lea|mov|xor|and|or|add|sub|test|cmp)\b`)
	objdumpTarget   = regexp.MustCompile(`^(j[a-z]+|call|loop\w*)\s+([0-9a-f]+) <`)
)

// expectedEntry applies the entry rule to objdump's view of a function:
// the first instruction when emulated, else the first emulated one after at
// most four skippable ones that write neither %rsp nor %r14, unless a jump
// targets the skipped bytes or the function has an indirect jump.
func expectedEntry(insts []disassembled) uint64 {
	start := insts[0].addr
	if objdumpEmulated.MatchString(insts[0].text) {
		return start
	}
	site := uint64(0)
	for i := 0; i < len(insts) && i <= 4; i++ {
		if objdumpEmulated.MatchString(insts[i].text) {
			site = insts[i].addr
			break
		}
		if !objdumpSkip.MatchString(insts[i].text) || strings.HasSuffix(insts[i].text, ",%rsp") || strings.HasSuffix(insts[i].text, ",%r14") {
			return start
		}
	}
	if site == 0 {
		return start
	}
	for _, in := range insts {
		if strings.HasPrefix(in.text, "jmp") && strings.Contains(in.text, "*") {
			return start
		}
		if m := objdumpTarget.FindStringSubmatch(in.text); m != nil {
			t, _ := strconv.ParseUint(m[2], 16, 64)
			if t > start && t <= site {
				return start
			}
		}
	}
	return site
}

// TestHarnessPlacement checks the placement decision for every harness
// function against expectations derived from objdump: the entry site, and
// for "return" a uretprobe on that same site; and the per-RET site Go code
// would get.
func TestHarnessPlacement(t *testing.T) {
	bin := testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
	b := open(t, bin)
	for _, name := range []string{"f_endbr", "f_push", "f_lea", "f_nop5", "f_leaf_lea", "f_back", "f_indirect", "f_nop_ret", "f_rec", "usdt_pair"} {
		t.Run(name, func(t *testing.T) {
			fn, err := b.Lookup(Spec{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			insts := objdumpFunction(t, bin, fn)
			if len(insts) == 0 {
				t.Fatal("objdump shows no instructions")
			}
			wantEntry, err := b.FileOffset(expectedEntry(insts))
			if err != nil {
				t.Fatal(err)
			}
			plan, err := b.PlanProbe(1, name, ExitReturn)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %v", name, plan.Notes)
			if s := plan.Sites[0]; s.Kind != scopeprobe.Entry || s.Offset != wantEntry {
				t.Errorf("entry %+v, want file offset %#x", s, wantEntry)
			}
			exits := plan.Sites[1:]
			if len(exits) != 1 || exits[0].Kind != scopeprobe.ReturnProbe || exits[0].Offset != wantEntry {
				t.Errorf("exits %+v, want one uretprobe at the entry's %#x", exits, wantEntry)
			}

			// The RET placement Go code gets: the nop just before a RET
			// that no branch targets, else the RET.
			code := b.analyse(fn)
			if code.err != nil {
				t.Fatal(code.err)
			}
			targets := map[uint64]bool{}
			for _, in := range insts {
				if m := objdumpTarget.FindStringSubmatch(in.text); m != nil {
					t, _ := strconv.ParseUint(m[2], 16, 64)
					targets[t] = true
				}
			}
			r := 0
			for i, in := range insts {
				if !strings.HasPrefix(in.text, "ret") {
					continue
				}
				want := in.addr
				if i > 0 && insts[i-1].text == "nop" && !targets[in.addr] && !code.indirect {
					want = insts[i-1].addr
				}
				for !code.insts[r].ret {
					r++
				}
				if got, _ := placeReturn(code.insts, r, code.targets, code.indirect); fn.Start+got != want {
					t.Errorf("RET at %#x: exit site %#x, want %#x", in.addr, fn.Start+got, want)
				}
				r++
			}
		})
	}
}

// TestUSDTSites places a USDT pair: one site per note that readelf lists,
// its semaphore as the reference counter, at file offsets.
func TestUSDTSites(t *testing.T) {
	bin := testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
	b := open(t, bin)
	out, err := exec.Command(testenv.LookPath(t, "readelf"), "-n", "-W", bin).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	// readelf prints per note: Provider, Name, then
	// "Location: 0x..., Base: 0x..., Semaphore: 0x...".
	type note struct{ pc, sem uint64 }
	notes := map[string]note{}
	var name string
	loc := regexp.MustCompile(`Location: 0x([0-9a-f]+), Base: 0x[0-9a-f]+, Semaphore: 0x([0-9a-f]+)`)
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if n, ok := strings.CutPrefix(line, "Name: "); ok {
			name = n
		}
		if m := loc.FindStringSubmatch(line); m != nil {
			pc, _ := strconv.ParseUint(m[1], 16, 64)
			sem, _ := strconv.ParseUint(m[2], 16, 64)
			notes[name] = note{pc, sem}
		}
	}
	if len(notes) != 2 {
		t.Fatalf("readelf shows notes %v, want begin and end", notes)
	}
	plan, err := b.PlanProbe(2, "usdt:bpfcol:begin", "usdt:bpfcol:end")
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Sites) != 2 {
		t.Fatalf("sites %+v", plan.Sites)
	}
	for i, n := range []string{"begin", "end"} {
		s := plan.Sites[i]
		pc, _ := b.FileOffset(notes[n].pc)
		sem, err := b.dataFileOffset(notes[n].sem)
		if err != nil {
			t.Fatal(err)
		}
		wantKind := []scopeprobe.SiteKind{scopeprobe.Entry, scopeprobe.Exit}[i]
		if s.Kind != wantKind || s.Offset != pc || s.RefCtrOffset != sem || sem == 0 || s.ProbeID != 2 {
			t.Errorf("%s: %+v, want %s at %#x with semaphore at %#x", n, s, wantKind, pc, sem)
		}
	}
	// A name the binary lacks is an error listing the probes it has.
	if _, err := b.PlanProbe(0, "usdt:bpfcol:nope", "usdt:bpfcol:end"); !errors.Is(err, ErrNoSymbol) ||
		!strings.Contains(err.Error(), "bpfcol:begin, bpfcol:end") {
		t.Errorf("usdt:bpfcol:nope: %v, want ErrNoSymbol listing bpfcol:begin, bpfcol:end", err)
	}
	for _, bad := range [][2]string{{"usdt:bpfcol:begin", "return"}, {"usdt:bpfcol:nope", "usdt:bpfcol:end"}, {"usdt:bpfcol:begin", "f_push"}} {
		if _, err := b.PlanProbe(0, bad[0], bad[1]); err == nil {
			t.Errorf("%s -> %s planned", bad[0], bad[1])
		}
	}
	if _, err := ParseSpec("usdt:onlyprovider"); err == nil {
		t.Error("a USDT reference without a name parsed")
	}
}

// TestPlacedPairsCount attaches the scope programs at the placed sites and
// checks one record per outermost call of the harness (its warm-up call
// included), no exit without entry, and for USDT that the kernel raised
// the semaphores while attached.
func TestPlacedPairsCount(t *testing.T) {
	testenv.RequireBPF(t)
	bin := testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
	b := open(t, bin)
	const calls = 1000
	for _, fn := range []string{"f_endbr", "f_lea", "f_nop5", "f_rec", "usdt_pair", "usdt"} {
		t.Run(fn, func(t *testing.T) {
			p, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var plan Plan
			if fn == "usdt" {
				plan, err = b.PlanProbe(0, "usdt:bpfcol:begin", "usdt:bpfcol:end")
			} else {
				plan, err = b.PlanProbe(0, fn, ExitReturn)
			}
			if err != nil {
				t.Fatal(err)
			}
			a, err := p.Attach(bin, plan.Sites)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			run := runHarness(t, bin, map[string]string{"usdt_pair": "usdt"}[fn]+strings.TrimPrefix(fn, "usdt_pair"), calls)
			if fn == "usdt" && (run.semaphores[0] == 0 || run.semaphores[1] == 0) {
				t.Errorf("semaphores %v while attached", run.semaphores)
			}
			records := 0
			var rec scopeprobe.Record
			p.SetDeadline(time.Now().Add(2 * time.Second))
			for records < calls+1 {
				if err := p.Read(&rec); err != nil {
					break
				}
				records++
			}
			c, err := p.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if records != calls+1 || c.ExitWithoutEntry != 0 || c.LostRingbuf != 0 {
				t.Errorf("%d records for %d calls, counters %+v (sites %+v)", records, calls+1, c, plan.Sites)
			}
		})
	}
}

// TestExplicitOffsetBoundaries asks for an entry at every byte of a
// harness function: an offset objdump shows an instruction starting at is
// planned there as given; one inside an instruction (where the breakpoint
// byte would become part of that instruction) is refused, and so is one
// past the end, including an offset that wraps the address around.
func TestExplicitOffsetBoundaries(t *testing.T) {
	bin := testworkload.BuildC(t, "fastprobe.c", harnessFlags...)
	b := open(t, bin)
	for _, name := range []string{"f_lea", "f_push", "f_endbr"} {
		fn, err := b.Lookup(Spec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		starts := map[uint64]bool{}
		for _, in := range objdumpFunction(t, bin, fn) {
			starts[in.addr-fn.Start] = true
		}
		if fn.End <= fn.Start || len(starts) < 2 {
			t.Fatalf("%s: size %d, %d instructions", name, fn.End-fn.Start, len(starts))
		}
		inside := 0
		for rel := uint64(1); rel < fn.End-fn.Start; rel++ {
			ref := name + "+" + strconv.FormatUint(rel, 10)
			plan, err := b.PlanProbe(1, ref, ExitReturn)
			if starts[rel] {
				want, _ := b.FileOffset(fn.Start + rel)
				if err != nil || plan.Sites[0].Offset != want {
					t.Errorf("%s, an instruction start: %+v, %v", ref, plan.Sites, err)
				}
				continue
			}
			inside++
			if err == nil || !strings.Contains(err.Error(), "inside the instruction") {
				t.Errorf("%s, inside an instruction: planned %+v, %v", ref, plan.Sites, err)
			}
		}
		if inside == 0 {
			t.Errorf("%s: no byte inside an instruction was tried", name)
		}
		for _, rel := range []uint64{fn.End - fn.Start, math.MaxUint64, -(fn.Start - 0x10)} {
			ref := name + "+" + strconv.FormatUint(rel, 10)
			if plan, err := b.PlanProbe(1, ref, ExitReturn); err == nil || !strings.Contains(err.Error(), "past the function's end") {
				t.Errorf("%s: planned %+v, %v", ref, plan.Sites, err)
			}
		}
	}
}
