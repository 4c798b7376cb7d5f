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
func TestGoReturnSites(t *testing.T) {
	bin := testworkload.BuildGo(t, "goscope", "-ldflags=-s -w")
	b := open(t, bin)
	plan, err := b.PlanProbe(0, "main.blockingScope", ExitReturn)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Entry.Go || plan.Sites[0].Kind != scopeprobe.Entry || !plan.Sites[0].ScopeByGoroutine {
		t.Fatalf("entry %+v", plan.Sites[0])
	}
	// objdump is the ground truth for instruction boundaries.
	out, err := exec.Command(testenv.LookPath(t, "objdump"), "-d", "--no-show-raw-insn",
		"--start-address="+strconv.FormatUint(plan.Entry.Start, 10),
		"--stop-address="+strconv.FormatUint(plan.Entry.End, 10), bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var rets []uint64
	var afterJbe uint64
	lines := strings.Split(string(out), "\n")
	for i, line := range lines {
		addr, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(addr, 16, 64)
		if err != nil {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(rest), "ret") {
			rets = append(rets, a)
		}
		if afterJbe == 0 && strings.HasPrefix(strings.TrimSpace(rest), "jbe") && i+1 < len(lines) {
			next, _, _ := strings.Cut(strings.TrimSpace(lines[i+1]), ":")
			afterJbe, _ = strconv.ParseUint(next, 16, 64)
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
	wantEntry, _ := b.FileOffset(afterJbe)
	if afterJbe == 0 || plan.Sites[0].Offset != wantEntry {
		t.Errorf("entry at %#x, want after the stack check's jbe at %#x", plan.Sites[0].Offset, wantEntry)
	}
}
