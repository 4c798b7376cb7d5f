package ebpfprofreceiver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/ianlancetaylor/demangle"

	"github.com/bpfcol/bpfcol/internal/testdebuginfod"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// requireTool returns the path of the first tool found, skipping the test
// when none is installed (failing it under BPFCOL_REQUIRE_BPF=1).
func requireTool(t *testing.T, names ...string) string {
	t.Helper()
	return testenv.LookPath(t, names...)
}

func runTool(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}

// gnuBuildID reads the GNU build-id of bin with readelf.
func gnuBuildID(t *testing.T, bin string) string {
	t.Helper()
	out := runTool(t, "", "readelf", "-n", bin)
	_, rest, ok := strings.Cut(out, "Build ID: ")
	if !ok {
		t.Fatalf("%s has no GNU build-id", bin)
	}
	return strings.Fields(rest)[0]
}

// emittedFrame is one user frame of the workload as the profile carries it.
type emittedFrame struct {
	addr    uint64
	buildID string
	lines   []frameLine
}

type frameLine struct {
	function, file string
	line           int64
}

// workloadFrames returns, per exported profile in order, the frames that
// sit in the mapping of path.
func workloadFrames(all []pprofile.Profiles, path string) [][]emittedFrame {
	var out [][]emittedFrame
	for _, p := range all {
		d := p.Dictionary()
		str := func(i int32) string { return d.StringTable().At(int(i)) }
		var frames []emittedFrame
		for i := 0; i < d.LocationTable().Len(); i++ {
			loc := d.LocationTable().At(i)
			if loc.MappingIndex() <= 0 {
				continue
			}
			m := d.MappingTable().At(int(loc.MappingIndex()))
			if str(m.FilenameStrindex()) != path {
				continue
			}
			f := emittedFrame{addr: loc.Address()}
			for _, ai := range m.AttributeIndices().AsRaw() {
				a := d.AttributeTable().At(int(ai))
				if str(a.KeyStrindex()) == "process.executable.build_id.gnu" {
					f.buildID = a.Value().Str()
				}
			}
			for j := 0; j < loc.Lines().Len(); j++ {
				l := loc.Lines().At(j)
				fn := d.FunctionTable().At(int(l.FunctionIndex()))
				f.lines = append(f.lines, frameLine{str(fn.NameStrindex()), str(fn.FilenameStrindex()), l.Line()})
			}
			frames = append(frames, f)
		}
		out = append(out, frames)
	}
	return out
}

// llvmLines names addrs in bin with llvm-symbolizer, innermost first.
func llvmLines(t *testing.T, bin string, addrs []uint64) [][]frameLine {
	t.Helper()
	var in strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	out := runTool(t, in.String(), requireTool(t, "llvm-symbolizer", "llvm-symbolizer-14"), "--obj="+bin, "--functions=linkage", "--inlining", "--demangle")
	blocks := strings.Split(strings.TrimRight(out, "\n"), "\n\n")
	res := make([][]frameLine, len(addrs))
	for i := 0; i < len(blocks) && i < len(addrs); i++ {
		lines := strings.Split(blocks[i], "\n")
		for j := 0; j+1 < len(lines); j += 2 {
			fl := frameLine{function: lines[j]}
			pos := lines[j+1]
			if k := strings.LastIndexByte(pos, ':'); k >= 0 {
				pos = pos[:k] // column
				if k := strings.LastIndexByte(pos, ':'); k >= 0 {
					fl.file = pos[:k]
					fl.line, _ = strconv.ParseInt(pos[k+1:], 10, 64)
				}
				// "??" is llvm-symbolizer's spelling of no file: code
				// without line info, such as crt1.o's _start, which
				// complete stacks end in.
				if fl.file == "??" {
					fl.file = ""
				}
			}
			res[i] = append(res[i], fl)
		}
	}
	return res
}

// sameName compares a demangled name with LLVM 14's, which spells nested
// template closers "> >" and the template operator< <T> "operator<<T",
// and leaves some names mangled: those are demangled here (GCC's clone
// suffixes as bpfcol writes them, " (.suffix)") and then compared.
func sameName(got, llvm string) bool {
	if strings.HasPrefix(llvm, "_Z") {
		base, suffix, cloned := strings.Cut(llvm, ".")
		d, err := demangle.ToString(base, demangle.LLVMStyle)
		if err != nil {
			return got == llvm
		}
		if cloned {
			d += " (." + suffix + ")"
		}
		llvm = d
	}
	norm := func(s string) string {
		for strings.Contains(s, "> >") {
			s = strings.ReplaceAll(s, "> >", ">>")
		}
		return strings.ReplaceAll(s, "operator< <", "operator<<")
	}
	return norm(got) == norm(llvm)
}

// TestStrippedBinariesNamedThroughDebuginfod profiles stripped C and C++
// builds with the receiver, whose symbolizer fetches their debug info from
// a real debuginfod serving the unstripped builds. The first profile's
// frames go out with build-id and address while the fetch runs; later
// profiles name them, with file:line and inline chains identical to
// llvm-symbolizer on the unstripped builds.
func TestStrippedBinariesNamedThroughDebuginfod(t *testing.T) {
	testenv.RequireBPF(t)
	requireTool(t, "objcopy")
	requireTool(t, "g++")
	srv, runDir := t.TempDir(), t.TempDir()
	csrc, _ := filepath.Abs("../../internal/symbolize/testdata/cinline/main.c")
	cppsrc, _ := filepath.Abs("../../internal/symbolize/testdata/cppworkload/main.cpp")
	type target struct{ full, stripped, id string }
	var targets []target
	var ids []string
	for _, b := range []struct{ name, compiler, src string }{{"cinline", "gcc", csrc}, {"cppworkload", "g++", cppsrc}} {
		full := filepath.Join(srv, b.name)
		runTool(t, "", b.compiler, "-O2", "-g", "-fno-omit-frame-pointer", "-o", full, b.src)
		stripped := filepath.Join(runDir, b.name)
		runTool(t, "", "objcopy", "--strip-all", full, stripped)
		id := gnuBuildID(t, stripped)
		if id != gnuBuildID(t, full) {
			t.Fatalf("%s: stripping changed the build-id", b.name)
		}
		targets = append(targets, target{full, stripped, id})
		ids = append(ids, id)
	}
	url := testdebuginfod.Start(t, srv, ids...)

	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	cfg.Symbolizer.Debuginfod.URLs = []string{url}
	cfg.Symbolizer.Debuginfod.Timeout = 30 * time.Second
	cfg.Symbolizer.CacheDir = t.TempDir()
	r := startProfilesReceiver(t, cfg, sink)
	for _, tg := range targets {
		testworkload.Start(t, tg.stripped, "spin")
	}
	time.Sleep(5 * time.Second)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkNoImpossibleFrames(t, sink.AllProfiles())
	if _, err := os.Stat(filepath.Join(cfg.Symbolizer.CacheDir, ".build-id")); err != nil {
		t.Errorf("nothing cached: %v", err)
	}

	for _, tg := range targets {
		perProfile := workloadFrames(sink.AllProfiles(), tg.stripped)
		firstNamed := -1
		var pendingOut, named []emittedFrame
		for i, frames := range perProfile {
			for _, f := range frames {
				if f.buildID != tg.id || f.addr == 0 {
					t.Fatalf("%s: frame went out with build-id %q, address %#x", tg.stripped, f.buildID, f.addr)
				}
				if len(f.lines) == 0 {
					if firstNamed < 0 {
						pendingOut = append(pendingOut, f)
					}
					continue
				}
				if firstNamed < 0 {
					firstNamed = i
				}
				named = append(named, f)
			}
		}
		name := filepath.Base(tg.stripped)
		t.Logf("%s: %d profiles, %d frames out unnamed before the first named (profile %d), %d named frames", name, len(perProfile), len(pendingOut), firstNamed, len(named))
		if len(pendingOut) == 0 {
			t.Errorf("%s: no frame went out with only build-id and address while its debug info was fetched", name)
		}
		if firstNamed < 0 || len(named) < 5 {
			t.Fatalf("%s: %d named frames: later profiles do not carry names", name, len(named))
		}
		addrs := make([]uint64, len(named))
		for i, f := range named {
			addrs[i] = f.addr
		}
		want := llvmLines(t, tg.full, addrs)
		misses, inlined := 0, 0
		for i, f := range named {
			if len(f.lines) > 1 {
				inlined++
			}
			ok := len(f.lines) == len(want[i])
			for j := 0; ok && j < len(f.lines); j++ {
				g, w := f.lines[j], want[i][j]
				ok = sameName(g.function, w.function) && g.file == w.file && g.line == w.line
			}
			if !ok {
				misses++
				if misses <= 5 {
					t.Logf("%s %#x: profile %+v, llvm-symbolizer %+v", name, f.addr, f.lines, want[i])
				}
			}
		}
		t.Logf("%s: %d named frames, %d with inline chains, %d differ from llvm-symbolizer", name, len(named), inlined, misses)
		if misses > 0 {
			t.Errorf("%s: %d of %d frames differ from llvm-symbolizer", name, misses, len(named))
		}
		if inlined == 0 {
			t.Errorf("%s: no frame carries an inline chain", name)
		}
	}
}
