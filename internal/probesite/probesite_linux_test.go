package probesite

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

func open(t testing.TB, path string) *Binary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(f, symbolize.NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestParseSpec(t *testing.T) {
	for in, want := range map[string]Spec{
		"getaddrinfo":              {Name: "getaddrinfo"},
		"getaddrinfo@@GLIBC_2.2.5": {Name: "getaddrinfo", Version: "GLIBC_2.2.5"},
		"f+0x10":                   {Name: "f", Offset: 16},
		"ns::T::operator+":         {Name: "ns::T::operator+"},
		"main.(*T).Run+4":          {Name: "main.(*T).Run", Offset: 4},
		"memcpy@GLIBC_2.2.5+0x8":   {Name: "memcpy", Version: "GLIBC_2.2.5", Offset: 8},
	} {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}

// dynsymValue asks readelf for a versioned dynamic symbol's value.
func dynsymValue(t *testing.T, lib, name string) uint64 {
	out, err := exec.Command(testenv.LookPath(t, "readelf"), "--dyn-syms", "-W", lib).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[7] == name {
			v, _ := strconv.ParseUint(f[1], 16, 64)
			return v
		}
	}
	t.Fatalf("readelf has no %s in %s", name, lib)
	return 0
}

// TestVersionedLibcSymbol resolves getaddrinfo in the system libc with and
// without its version, against readelf.
func TestVersionedLibcSymbol(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	testenv.RequireFile(t, libc, "libc6")
	want := dynsymValue(t, libc, "getaddrinfo@@GLIBC_2.2.5")
	b := open(t, libc)
	for _, ref := range []string{"getaddrinfo", "getaddrinfo@@GLIBC_2.2.5"} {
		spec, _ := ParseSpec(ref)
		fn, err := b.Lookup(spec)
		if err != nil || fn.Start != want || fn.Go {
			t.Errorf("%s: %+v, %v; readelf says %#x", ref, fn, err, want)
		}
	}
	if _, err := b.Lookup(Spec{Name: "getaddrinfo", Version: "GLIBC_9.9"}); err == nil {
		t.Error("a wrong version resolved")
	}
	plan, err := b.PlanProbe(3, "getaddrinfo", ExitReturn)
	if err != nil || len(plan.Sites) != 2 || plan.Sites[1].Kind != scopeprobe.ReturnProbe || plan.Sites[0].ProbeID != 3 {
		t.Fatalf("plan %+v, %v", plan, err)
	}
}

// TestGoReturnSites places a Go probe in a stripped build: entry after the
// stack check, one exit per RET that objdump shows, never a uretprobe.
// TestGoReturnSites places a Go function's probe on x86-64 and on arm64
// (cross-built): its entry right after the stack-bound check's branch to
// morestack, an exit at each of its returns, as objdump reads them.
func TestGoReturnSites(t *testing.T) {
	for _, c := range []struct {
		name, objdump, checkBranch string
		tc                         testworkload.Toolchain
	}{
		{"amd64", "objdump", "jbe", testworkload.HostToolchain},
		{"arm64", "aarch64-linux-gnu-objdump", "b.ls", testworkload.ARM64Toolchain},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin, err := testworkload.Compile(testworkload.Workload{Compiler: testworkload.Go, Name: "goscope", Flags: []string{"-ldflags=-s -w"}}, c.tc, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			b := open(t, bin)
			plan, err := b.PlanProbe(0, "main.blockingScope", ExitReturn)
			if err != nil {
				t.Fatal(err)
			}
			if !plan.Entry.Go || plan.Sites[0].Kind != scopeprobe.Entry || !plan.Sites[0].ScopeByGoroutine {
				t.Fatalf("entry %+v", plan.Sites[0])
			}
			// objdump is the ground truth for instruction boundaries.
			var rets []uint64
			var afterCheck uint64
			insts := objdumpFunctionWith(t, c.objdump, bin, plan.Entry)
			for i, in := range insts {
				if strings.HasPrefix(in.text, "ret") {
					rets = append(rets, in.addr)
				}
				if afterCheck == 0 && strings.HasPrefix(in.text, c.checkBranch) && i+1 < len(insts) {
					afterCheck = insts[i+1].addr
				}
			}
			exits := plan.Sites[1:]
			if len(exits) != len(rets) || len(rets) == 0 {
				t.Fatalf("%d exit sites, objdump shows %d RETs", len(exits), len(rets))
			}
			for i, s := range exits {
				off, _ := b.FileOffset(rets[i])
				if s.Kind != scopeprobe.Exit || s.Offset != off || !s.ScopeByGoroutine {
					t.Errorf("exit %d: %+v, want a uprobe at file offset %#x", i, s, off)
				}
			}
			wantEntry, _ := b.FileOffset(afterCheck)
			if afterCheck == 0 || plan.Sites[0].Offset != wantEntry {
				t.Errorf("entry at %#x, want after the stack check's %s at %#x", plan.Sites[0].Offset, c.checkBranch, wantEntry)
			}
			t.Logf("%s: %v", c.name, plan.Notes)
		})
	}
}

// TestPlacementA64 places the probes of an arm64 C function: its entry at
// its first instruction (the prologue's store of x30 and x29 is
// single-stepped, and a uretprobe must see x30 before it is saved), its
// exit a uretprobe there; and checks every instruction the decoder reads
// against objdump's boundaries and branch targets.
func TestPlacementA64(t *testing.T) {
	bin, err := testworkload.Compile(testworkload.Workload{Compiler: testworkload.GCC, Name: "scopeburn.c", Flags: []string{"-O1", "-g"}}, testworkload.ARM64Toolchain, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, bin)
	fn, err := b.Lookup(Spec{Name: "burn"})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := b.PlanProbe(0, "burn", ExitReturn)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := b.FileOffset(fn.Start)
	if len(plan.Sites) != 2 || plan.Sites[0].Kind != scopeprobe.Entry || plan.Sites[1].Kind != scopeprobe.ReturnProbe ||
		plan.Sites[0].Offset != start || plan.Sites[1].Offset != start {
		t.Errorf("sites %+v, want an entry and a uretprobe at burn's start (file offset %#x); notes %v", plan.Sites, start, plan.Notes)
	}
	code := b.analyse(fn)
	if code.err != nil {
		t.Fatal(code.err)
	}
	truth := objdumpFunctionWith(t, "aarch64-linux-gnu-objdump", bin, fn)
	if len(truth) != len(code.insts) {
		t.Fatalf("decoded %d instructions, objdump %d", len(code.insts), len(truth))
	}
	for i, in := range code.insts {
		d := truth[i]
		fields := strings.Fields(strings.ReplaceAll(d.text, ",", " "))
		mnemonic := fields[0]
		if fn.Start+in.off != d.addr {
			t.Fatalf("instruction %d at %#x, objdump's at %#x", i, fn.Start+in.off, d.addr)
		}
		simulated := mnemonic == "b" || strings.HasPrefix(mnemonic, "b.") || mnemonic == "bl" || mnemonic == "cbz" || mnemonic == "cbnz" ||
			mnemonic == "tbz" || mnemonic == "tbnz" || mnemonic == "br" || mnemonic == "blr" || mnemonic == "ret" || mnemonic == "adr" || mnemonic == "adrp"
		if in.emulated != simulated {
			t.Errorf("%#x %s: emulated %v", d.addr, d.text, in.emulated)
		}
		// A direct branch's target, as objdump prints it: an address
		// followed by its symbol.
		var target uint64
		for j := 1; j+1 < len(fields); j++ {
			if a, err := strconv.ParseUint(fields[j], 16, 64); err == nil && strings.HasPrefix(fields[j+1], "<") && mnemonic != "adrp" && mnemonic != "adr" {
				target = a
			}
		}
		if got := fn.Start + uint64(in.target); (target != 0) != in.hasTarget || in.hasTarget && got != target {
			t.Errorf("%#x %s: target %#x (%v), objdump's %#x", d.addr, d.text, got, in.hasTarget, target)
		}
		if in.ret != (mnemonic == "ret") {
			t.Errorf("%#x %s: ret %v", d.addr, d.text, in.ret)
		}
	}
	t.Logf("burn: %d instructions; %v", len(code.insts), plan.Notes)
}
