//go:build linux

package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// workloadDir holds the binaries built once per test process.
var workloadDir string

func TestMain(m *testing.M) { os.Exit(symtest.Main(m, "symbolize-test-", &workloadDir)) }

// workload is one built binary.
type workload struct {
	name string
	path string
	isGo bool
}

var (
	buildOnce  sync.Once
	workloads  map[string]workload
	buildError error
)

// builtWorkloads builds the C and Go workloads once for all tests.
func builtWorkloads(tb testing.TB) map[string]workload {
	tb.Helper()
	requireTools(tb, "gcc", "go", "nm", "addr2line", "objcopy", "readelf")
	buildOnce.Do(func() {
		csrc, err := filepath.Abs("testdata/cworkload/main.c")
		if err != nil {
			buildError = err
			return
		}
		gosrc, err := filepath.Abs("testdata/goworkload/main.go")
		if err != nil {
			buildError = err
			return
		}
		cgosrc, err := filepath.Abs("testdata/gocgoworkload/main.go")
		if err != nil {
			buildError = err
			return
		}
		cflags := []string{"-O2", "-fno-omit-frame-pointer", "-g"}
		builds := []struct {
			w    workload
			args []string
		}{
			{workload{name: "c-pie"}, append(append([]string{"gcc"}, cflags...), "-pie", "-fPIE", "-o", "c-pie", csrc)},
			{workload{name: "c-nopie"}, append(append([]string{"gcc"}, cflags...), "-no-pie", "-fno-PIE", "-o", "c-nopie", csrc)},
			{workload{name: "go", isGo: true}, []string{"go", "build", "-o", "go", gosrc}},
			{workload{name: "go-stripped", isGo: true}, []string{"go", "build", "-ldflags=-s -w", "-o", "go-stripped", gosrc}},
			{workload{name: "go-pie", isGo: true}, []string{"go", "build", "-buildmode=pie", "-o", "go-pie", gosrc}},
			{workload{name: "go-pie-stripped", isGo: true}, []string{"go", "build", "-buildmode=pie", "-ldflags=-s -w", "-o", "go-pie-stripped", gosrc}},
			{workload{name: "go-cgo-pie", isGo: true}, []string{"go", "build", "-buildmode=pie", "-o", "go-cgo-pie", cgosrc}},
			{workload{name: "go-cgo-pie-stripped", isGo: true}, []string{"go", "build", "-buildmode=pie", "-ldflags=-s -w", "-o", "go-cgo-pie-stripped", cgosrc}},
		}
		workloads = make(map[string]workload)
		for _, b := range builds {
			cmd := exec.Command(b.args[0], b.args[1:]...)
			cmd.Dir = workloadDir
			// The Go workloads are lone files outside any module. Without cgo
			// the linking stays internal; the cgo one links externally.
			cgo := "CGO_ENABLED=0"
			if strings.HasPrefix(b.w.name, "go-cgo") {
				cgo = "CGO_ENABLED=1"
			}
			cmd.Env = append(os.Environ(), cgo)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildError = fmt.Errorf("building %s: %v\n%s", b.w.name, err, out)
				return
			}
			b.w.path = filepath.Join(workloadDir, b.w.name)
			workloads[b.w.name] = b.w
		}
	})
	if buildError != nil {
		tb.Fatal(buildError)
	}
	return workloads
}

func requireTools(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, tool := range tools {
		testenv.LookPath(tb, tool)
	}
}

func run(tb testing.TB, stdin string, name string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
	}
	return string(out)
}

// nmFunc is a function symbol as listed by nm.
type nmFunc struct {
	name  string
	addr  uint64
	size  uint64
	class byte // nm's letter: T global, W/w weak, t local, i ifunc
}

// nmFunctions lists the defined STT_FUNC symbols of a C binary using
// nm's System V format, which shows the ELF symbol type.
func nmFunctions(tb testing.TB, bin string) []nmFunc {
	tb.Helper()
	var funcs []nmFunc
	sc := bufio.NewScanner(strings.NewReader(run(tb, "", "nm", "-f", "sysv", "--defined-only", bin)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 7 {
			continue
		}
		typ := strings.TrimSpace(f[3])
		if typ != "FUNC" && typ != "IFUNC" && typ != "GNU_IFUNC" {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(f[1]), 16, 64)
		if err != nil {
			tb.Fatalf("parsing nm line %q: %v", sc.Text(), err)
		}
		var size uint64
		if s := strings.TrimSpace(f[4]); s != "" {
			if size, err = strconv.ParseUint(s, 16, 64); err != nil {
				tb.Fatalf("parsing nm line %q: %v", sc.Text(), err)
			}
		}
		funcs = append(funcs, nmFunc{name: strings.TrimSpace(f[0]), addr: addr, size: size, class: strings.TrimSpace(f[2])[0]})
	}
	if len(funcs) == 0 {
		tb.Fatalf("nm lists no functions in %s", bin)
	}
	return funcs
}

// goNMFunctions lists the text symbols of an unstripped Go binary.
func goNMFunctions(tb testing.TB, bin string) []nmFunc {
	tb.Helper()
	var funcs []nmFunc
	sc := bufio.NewScanner(strings.NewReader(run(tb, "", "go", "tool", "nm", "-size", bin)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || (f[2] != "T" && f[2] != "t") {
			continue
		}
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		size, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			tb.Fatalf("parsing go tool nm line %q", sc.Text())
		}
		funcs = append(funcs, nmFunc{name: strings.Join(f[3:], " "), addr: addr, size: size, class: f[2][0]})
	}
	if len(funcs) == 0 {
		tb.Fatalf("go tool nm lists no text symbols in %s", bin)
	}
	return funcs
}

// sampleAddresses returns every symbol's start and a few deterministic
// random addresses inside each sized symbol.
func sampleAddresses(funcs []nmFunc, perFunc int) []uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	var addrs []uint64
	for _, f := range funcs {
		addrs = append(addrs, f.addr)
		for i := 0; i < perFunc && f.size > 1; i++ {
			addrs = append(addrs, f.addr+1+rng.Uint64N(f.size-1))
		}
	}
	return addrs
}

// addr2lineResult is one answer of addr2line or go tool addr2line.
type addr2lineResult struct {
	function string
	file     string
	line     int64
}

// addr2line resolves addrs in one batch. tool is either
// {"addr2line", "-f", "-e", bin} or {"go", "tool", "addr2line", bin}; both
// print a function line and a file:line line per address.
func addr2line(tb testing.TB, addrs []uint64, tool ...string) []addr2lineResult {
	tb.Helper()
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	lines := strings.Split(strings.TrimRight(run(tb, in.String(), tool[0], tool[1:]...), "\n"), "\n")
	if len(lines) != 2*len(addrs) {
		tb.Fatalf("%v printed %d lines for %d addresses", tool, len(lines), len(addrs))
	}
	res := make([]addr2lineResult, len(addrs))
	for i := range addrs {
		res[i].function = lines[2*i]
		pos := lines[2*i+1]
		if j := strings.LastIndexByte(pos, ':'); j >= 0 {
			res[i].file = pos[:j]
			// addr2line appends " (discriminator N)".
			num, _, _ := strings.Cut(pos[j+1:], " ")
			res[i].line, _ = strconv.ParseInt(num, 10, 64)
			// go tool addr2line prints -1 for an unknown line; frame.Line uses 0.
			res[i].line = max(res[i].line, 0)
		}
	}
	return res
}

func openWorkload(tb testing.TB, path string) *Binary {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := OpenBinary(f, NewTables(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}
