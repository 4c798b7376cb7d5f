package scopes_test

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/bpf/scopes"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestSharedMapLoads loads the scope programs and the sampler (on-CPU and
// off-CPU) on one shared map, as the two receivers do in one collector: the
// verifier takes the programs with the lookups enabled, the map is created
// by the first Acquire and closed after the last Release.
func TestSharedMapLoads(t *testing.T) {
	testenv.RequireBPF(t)
	if scopes.Open() {
		t.Fatal("shared map open before any Acquire")
	}
	writer, err := scopes.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	reader, err := scopes.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if writer.Map() != reader.Map() {
		t.Fatal("two Acquires returned two maps")
	}
	probes, err := scopeprobe.New(scopeprobe.Options{Settings: []scopeprobe.Setting{{}}, Scopes: writer.Map(), ScopeProbeBase: 3})
	if err != nil {
		t.Fatalf("loading scope probes on the shared map: %v", err)
	}
	defer probes.Close()
	for _, offCPU := range []bool{false, true} {
		s, err := profiler.New(profiler.Options{
			Frequency: 19,
			Scopes:    reader.Map(),
			OffCPU:    profiler.OffCPUOptions{Enabled: offCPU, Probability: 0.01},
		})
		if err != nil {
			t.Fatalf("loading sampler (off-CPU %v) on the shared map: %v", offCPU, err)
		}
		s.Close()
	}
	if err := writer.Release(); err != nil {
		t.Fatal(err)
	}
	if err := writer.Release(); err != nil {
		t.Fatal(err)
	}
	if !scopes.Open() {
		t.Fatal("shared map closed while a reference is held (a second Release of one reference counted twice?)")
	}
	if err := reader.Release(); err != nil {
		t.Fatal(err)
	}
	if scopes.Open() {
		t.Fatal("shared map still open after the last Release")
	}
}

// TestRegisterProbes checks that two writers' probes get ids of their own,
// named back until unregistered.
func TestRegisterProbes(t *testing.T) {
	a, ua := scopes.RegisterProbes([]string{"x", "y"})
	b, ub := scopes.RegisterProbes([]string{"z"})
	defer ub()
	if n, _ := scopes.ProbeName(a + 1); n != "y" {
		t.Errorf("probe %d = %q, want y", a+1, n)
	}
	if n, _ := scopes.ProbeName(b); n != "z" || b == a || b == a+1 {
		t.Errorf("probe %d = %q, want z in a range of its own", b, n)
	}
	ua()
	if _, ok := scopes.ProbeName(a); ok {
		t.Errorf("probe %d named after unregister", a)
	}
}
