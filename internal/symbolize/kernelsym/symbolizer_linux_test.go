package kernelsym

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/bpf/ksymprog"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// refuseKallsyms is the BPF path's opener: any call fails the test.
func refuseKallsyms(t *testing.T) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		t.Error("the BPF path opened /proc/kallsyms")
		return nil, errors.New("kallsyms refused by the test")
	}
}

func newBPFSymbolizer(t *testing.T) *Symbolizer {
	t.Helper()
	testenv.RequireBPF(t)
	s, err := New(Options{OpenKallsyms: refuseKallsyms(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Path() != PathBPF {
		t.Fatalf("Path() = %q, want %q", s.Path(), PathBPF)
	}
	return s
}

func TestBPFPathMatchesKernelRules(t *testing.T) {
	s := newBPFSymbolizer(t)
	ref := loadReference(t)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	const n = 3*ksymprog.MaxBatch + 17 // several runs of the program, one partial
	addrs, isReturn := ref.sample(rng, n)

	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	diffs := ref.compare(addrs, isReturn, got)
	starts := 0
	for i, a := range addrs {
		if i%3 == 0 && a != 0 {
			starts++
		}
	}
	t.Logf("%d addresses (%d at a symbol start), %d mismatches", n, starts, len(diffs))
	for i, d := range diffs {
		if i == 20 {
			t.Errorf("... and %d more", len(diffs)-i)
			break
		}
		t.Error(d)
	}

	// Again, now mostly from the cache: the answers must not change.
	again, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := ref.compare(addrs, isReturn, again); len(diffs) > 0 {
		t.Errorf("%d mismatches from the cache, first: %s", len(diffs), diffs[0])
	}
	if st := s.Stats(); st.Cache.Hits == 0 {
		t.Errorf("no cache hits on the second pass: %+v", st)
	}
}

func TestBPFPathNamesVFSRead(t *testing.T) {
	s := newBPFSymbolizer(t)
	ref := loadReference(t)
	vfsRead := ref.addrOf(t, "vfs_read")
	size := ref.lookup(vfsRead, false).Size

	addrs := []uint64{vfsRead + size/2, vfsRead + size/3, vfsRead}
	got, err := s.Symbolize(addrs, []bool{false, true, true})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got[:2] {
		if !g.OK || g.Name != "vfs_read" || g.Module != "" || g.IsBPFProg {
			t.Errorf("address %#x: %+v, want vfs_read", addrs[i], g)
		}
	}
	// A return address at vfs_read's first byte belongs to the symbol before.
	if got[2].Name == "vfs_read" || !got[2].OK || got[2].Offset != got[2].Size {
		t.Errorf("return address at vfs_read's start: %+v, want the end of the preceding symbol", got[2])
	}
}

func TestBPFPathUnknownAddress(t *testing.T) {
	s := newBPFSymbolizer(t)
	got, err := s.Symbolize([]uint64{0x10, 0x10}, []bool{false, true})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.OK || g.Name != "" {
			t.Errorf("unknown address named %+v", g)
		}
	}
}

func TestBPFPathCacheIsBounded(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{OpenKallsyms: refuseKallsyms(t), CacheEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := loadReference(t)
	addrs, isReturn := ref.sample(rand.New(rand.NewPCG(1, 2)), 1000)
	got, err := s.Symbolize(addrs, isReturn)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := ref.compare(addrs, isReturn, got); len(diffs) > 0 {
		t.Errorf("%d mismatches, first: %s", len(diffs), diffs[0])
	}
	st := s.Stats()
	if n := s.cache.entries.Len(); n > 100 || st.Cache.Len != n {
		t.Errorf("cache holds %d entries (stats say %d), bound is 100", n, st.Cache.Len)
	}
	if st.Cache.Evictions == 0 {
		t.Errorf("1000 addresses through a 100-entry cache evicted 0 entries: %+v", st)
	}
	if st.Cache.Len != 100 {
		t.Errorf("a full cache holds %d entries after evicting: it was emptied, not trimmed: %+v", st.Cache.Len, st)
	}
}

func TestClosedSymbolizer(t *testing.T) {
	s := newBPFSymbolizer(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Symbolize([]uint64{1}, []bool{false}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Symbolize after Close: %v, want a closed error", err)
	}
}

// Environment of TestBPFPathChild, set only by
// TestBPFPathNeverOpensKallsyms: the request file and the answer file.
const (
	bpfChildIn  = "BPFCOL_KERNELSYM_BPF_CHILD_IN"
	bpfChildOut = "BPFCOL_KERNELSYM_BPF_CHILD_OUT"
)

// bpfChildRequest is what the parent asks the child to symbolize.
type bpfChildRequest struct {
	Addrs    []uint64
	IsReturn []bool
}

// TestBPFPathNeverOpensKallsyms runs the BPF path in a child process, built
// with default Options as bpfcol builds it, under strace, and fails if any
// thread of the child opens /proc/kallsyms: the symbolizer, cilium/ebpf or
// any other dependency. refuseKallsyms only sees the symbolizer's own
// opener; this sees every open the kernel is asked for. The parent reads
// kallsyms for the reference and compares the child's answers with it, so
// the child must really have symbolized.
func TestBPFPathNeverOpensKallsyms(t *testing.T) {
	testenv.RequireBPF(t)
	strace := testenv.LookPath(t, "strace")
	ref := loadReference(t)
	req := bpfChildRequest{}
	req.Addrs, req.IsReturn = ref.sample(rand.New(rand.NewPCG(3, 4)), 2000)
	dir := t.TempDir()
	in, out, trace := filepath.Join(dir, "request.json"), filepath.Join(dir, "answer.json"), filepath.Join(dir, "strace.log")
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=open,openat,openat2", "-e", "signal=none", "-o", trace,
		os.Args[0], "-test.run=^TestBPFPathChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), bpfChildIn+"="+in, bpfChildOut+"="+out)
	output, err := cmd.CombinedOutput()
	t.Logf("child output:\n%s", output)
	if err != nil {
		t.Fatalf("child under strace: %v", err)
	}
	if !bytes.Contains(output, []byte("--- PASS: TestBPFPathChild")) {
		t.Fatal("the child test did not run and pass")
	}

	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []Symbol
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("child's answer: %v", err)
	}
	if len(got) != len(req.Addrs) {
		t.Fatalf("child answered %d addresses of %d", len(got), len(req.Addrs))
	}
	if diffs := ref.compare(req.Addrs, req.IsReturn, got); len(diffs) > 0 {
		t.Errorf("child: %d mismatches, first: %s", len(diffs), diffs[0])
	}

	b, err = os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	sawRequest, opens, kallsyms := false, 0, 0
	for line := range strings.Lines(string(b)) {
		opens++
		// The trace must show the child's own opens, or it proves nothing.
		if strings.Contains(line, `"`+in+`"`) {
			sawRequest = true
		}
		if strings.Contains(line, "kallsyms") {
			kallsyms++
			t.Errorf("the BPF path opened kallsyms: %s", strings.TrimSpace(line))
		}
	}
	if !sawRequest {
		t.Fatalf("strace did not record the child opening %s; trace:\n%s", in, b)
	}
	t.Logf("%d opens traced, %d of kallsyms", opens, kallsyms)
}

// TestBPFPathChild runs inside TestBPFPathNeverOpensKallsyms's child
// process: it must not read kallsyms itself, so it takes its addresses
// from the parent.
func TestBPFPathChild(t *testing.T) {
	in, out := os.Getenv(bpfChildIn), os.Getenv(bpfChildOut)
	if in == "" {
		// TestBPFPathNeverOpensKallsyms is what fails or passes.
		return
	}
	b, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var req bpfChildRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != PathBPF {
		t.Fatalf("Path() = %q, want %q", s.Path(), PathBPF)
	}
	got, err := s.Symbolize(req.Addrs, req.IsReturn)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = json.Marshal(got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
