package kernelsym

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// Environment of TestFallbackChild, set only by TestFallbackWithoutPerfmon.
const (
	childEnv     = "BPFCOL_KERNELSYM_CHILD" // the path the child must take
	fallbackLine = "kernel symbols: the BPF formatter cannot load, reading /proc/kallsyms instead"
)

// TestFallbackWithoutPerfmon re-runs this test binary with capabilities
// taken out of the bounding set by capsh (as root, exec then drops them from
// the permitted and effective sets too). CAP_SYS_ADMIN alone still passes the
// kernel's perfmon_capable(), so only dropping both takes the BPF path away;
// the test checks both cases.
func TestFallbackWithoutPerfmon(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.RequireRoot(t)
	capsh := testenv.LookPath(t, "capsh")
	for _, c := range []struct {
		drop, wantPath string
	}{
		{"cap_perfmon", PathBPF},
		{"cap_perfmon,cap_sys_admin", PathKallsyms},
	} {
		t.Run(c.drop, func(t *testing.T) {
			cmd := exec.Command(capsh, "--drop="+c.drop, "--", "-c", `exec "$0" "$@"`,
				os.Args[0], "-test.run=^TestFallbackChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+c.wantPath)
			out, err := cmd.CombinedOutput()
			t.Logf("child output:\n%s", out)
			if err != nil {
				t.Fatalf("child without %s: %v", c.drop, err)
			}
			if !bytes.Contains(out, []byte("--- PASS: TestFallbackChild")) {
				t.Fatal("the child test did not run and pass")
			}
		})
	}
}

// TestFallbackChild runs inside TestFallbackWithoutPerfmon's child process.
func TestFallbackChild(t *testing.T) {
	wantPath := os.Getenv(childEnv)
	if wantPath == "" {
		// Only TestFallbackWithoutPerfmon's child runs this, under capsh;
		// that test is what fails or passes in a normal run.
		return
	}
	core, logs := observer.New(zap.InfoLevel)
	opens := 0
	s, err := New(Options{
		Logger: zap.New(core),
		OpenKallsyms: func() (io.ReadCloser, error) {
			opens++
			return os.Open("/proc/kallsyms")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("path %s", s.Path())
	if s.Path() != wantPath {
		t.Fatalf("Path() = %q, want %q", s.Path(), wantPath)
	}

	ref := loadReference(t)
	addrs, isReturn := coreTextSample(ref, 5000)
	vfsRead := ref.addrOf(t, "vfs_read")
	addrs = append(addrs, vfsRead+ref.lookup(vfsRead, false).Size/2)
	isReturn = append(isReturn, true)

	for pass := range 3 {
		got, err := s.Symbolize(addrs, isReturn)
		if err != nil {
			t.Fatal(err)
		}
		diffs := ref.compare(addrs, isReturn, got)
		t.Logf("pass %d: %d addresses, %d mismatches", pass, len(addrs), len(diffs))
		for i, d := range diffs {
			if i == 10 {
				break
			}
			t.Error(d)
		}
		if g := got[len(got)-1]; g.Name != "vfs_read" {
			t.Errorf("inside vfs_read: %+v", g)
		}
	}

	reasons := logs.FilterMessage(fallbackLine).All()
	switch wantPath {
	case PathKallsyms:
		if len(reasons) != 1 {
			t.Fatalf("fallback reason logged %d times, want once; all logs: %v", len(reasons), logs.All())
		}
		t.Logf("logged reason: %v", reasons[0].ContextMap()["error"])
		// Nothing loaded between the passes: one read, whatever the
		// change signature could see.
		if s.kallsyms.reads != 1 || opens != 1 {
			t.Errorf("kallsyms read %d times (%d opens) for 3 unchanged passes, want once", s.kallsyms.reads, opens)
		}
	case PathBPF:
		if len(reasons) != 0 || opens != 0 {
			t.Errorf("BPF path: %d fallback logs, %d kallsyms opens; want none", len(reasons), opens)
		}
	}
}

// coreTextSample is reference.sample limited to where the fallback's
// kallsyms reader and the kernel agree by construction: core text, before
// the last symbol under _etext (past it the kernel stops at _etext, and
// between _etext and _sinittext it names nothing).
func coreTextSample(ref *reference, n int) ([]uint64, []bool) {
	rng := rand.New(rand.NewPCG(3, 4))
	var addrs []uint64
	var isReturn []bool
	for len(addrs) < n {
		a, r := ref.sample(rng, 1)
		looked := a[0]
		if r[0] {
			looked--
		}
		if looked < ref.stext || looked >= ref.etext {
			continue
		}
		if sym := ref.lookup(a[0], r[0]); !sym.OK || looked-sym.Offset+sym.Size >= ref.etext {
			continue
		}
		addrs = append(addrs, a[0])
		isReturn = append(isReturn, r[0])
	}
	return addrs, isReturn
}

// TestFallbackRereadsOnlyOnChange loads and unloads a BPF program between
// batches: the snapshot must be re-read exactly then, and name the program
// as the BPF path does.
func TestFallbackRereadsOnlyOnChange(t *testing.T) {
	testenv.RequireBPF(t)
	ref := loadReference(t)
	if _, all := changeSignature(); !all {
		testenv.Unavailable(t, "cannot list BPF programs (needs CAP_SYS_ADMIN)")
	}
	opens := 0
	s, err := newSymbolizer(Options{
		OpenKallsyms: func() (io.ReadCloser, error) {
			opens++
			// The real file, read with addresses shown even under
			// kptr_restrict=2.
			return io.NopCloser(bytes.NewReader(testenv.Kallsyms(t))), nil
		},
	}, func() (formatter, error) { return nil, errors.New("BPF path disabled by the test") })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != PathKallsyms {
		t.Fatalf("Path() = %q", s.Path())
	}
	// Other processes on the host load and unload BPF programs too, and
	// each would rightly cause a read: the signature here sees only the
	// program this test loads.
	var mine ebpf.ProgramID
	s.kallsyms.changed = func() (uint64, bool) {
		return signatureOf(func(id ebpf.ProgramID) bool { return mine != 0 && id == mine })
	}
	vfsRead := ref.addrOf(t, "vfs_read")
	symbolize := func(addrs ...uint64) []Symbol {
		t.Helper()
		got, err := s.Symbolize(addrs, make([]bool, len(addrs)))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for range 3 {
		if got := symbolize(vfsRead, 0x10); got[0].Name != "vfs_read" || got[1].OK {
			t.Fatalf("got %+v", got)
		}
	}
	if opens != 1 {
		t.Fatalf("%d reads for 3 unchanged batches, want 1", opens)
	}

	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bpfcol_ksym_t",
		Type:         ebpf.SocketFilter,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		prog.Close()
		t.Fatal("the kernel gave no ID for the loaded program")
	}
	mine = id
	ksyms, ok := info.JitedKsymAddrs()
	if !ok || len(ksyms) == 0 || ksyms[0] == 0 {
		// kptr_restrict=2 hides them too.
		testenv.ShowKernelAddresses(t, func() {
			if info, err = prog.Info(); err == nil {
				ksyms, ok = info.JitedKsymAddrs()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !ok || len(ksyms) == 0 {
		prog.Close()
		testenv.Unavailable(t, "the kernel did not JIT the program (bpf_jit_enable=0?)")
	}
	progAddr := uint64(ksyms[0]) + 1
	got := symbolize(progAddr)[0]
	if opens != 2 {
		t.Errorf("%d reads after a program load, want 2", opens)
	}
	if !got.OK || !got.IsBPFProg || got.Module != "" || !strings.HasSuffix(got.Name, "_bpfcol_ksym_t") || got.Offset != 1 {
		t.Errorf("JIT-compiled program through kallsyms: %+v", got)
	}
	if bpfPath, err := New(Options{OpenKallsyms: refuseKallsyms(t)}); err == nil {
		viaBPF, err := bpfPath.Symbolize([]uint64{progAddr}, []bool{false})
		bpfPath.Close()
		if err != nil {
			t.Fatal(err)
		}
		if viaBPF[0].Name != got.Name || !viaBPF[0].IsBPFProg || viaBPF[0].Offset != got.Offset {
			t.Errorf("BPF path names the program %+v, kallsyms path %+v", viaBPF[0], got)
		}
	} else {
		t.Errorf("loading the BPF path for comparison: %v", err)
	}
	// The comparison above loaded and unloaded the formatter program, which
	// the narrowed signature does not see.
	readsBefore := opens
	prog.Close()
	symbolize(vfsRead)
	if opens != readsBefore+1 {
		t.Errorf("%d reads after a program unload, want %d", opens, readsBefore+1)
	}
}
