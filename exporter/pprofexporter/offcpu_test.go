package pprofexporter

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestOffCPUSampleType exports a process with an on-CPU and an off-CPU
// profile in one ResourceProfiles, as the ebpfprof receiver emits them, and
// checks that the pprof file holds both sample types, each sample valued
// under its own, with the off-CPU reason as a label; and that
// `go tool pprof -sample_index` switches between them.
func TestOffCPUSampleType(t *testing.T) {
	p := pprofile.NewProfiles()
	w := newDictWriter(p)
	start := pcommon.NewTimestampFromTime(time.Unix(1_700_000_000, 0))
	bin := w.mapping(testMapping{file: "/usr/bin/app", start: 0x1000, limit: 0x9000, gnu: "0a1b"})
	onCPU := w.newTestProfile(p, 100, "app", int64(1e9)/20, start)
	w.sample(onCPU, w.stack(w.location(bin, 0x1100, "native", testLine{name: "spin"})), 7, 101, "app")

	off := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().AppendEmpty()
	off.SampleType().SetTypeStrindex(w.str(conventions.SampleTypeOffCPU))
	off.SampleType().SetUnitStrindex(w.str(conventions.UnitNanoseconds))
	off.SetTime(start)
	off.SetDurationNano(5e9)
	s := off.Samples().AppendEmpty()
	s.SetStackIndex(w.stack(
		w.location(0, 0xffff_ffff_8100_0000, "kernel", testLine{name: "__schedule"}),
		w.location(bin, 0x1200, "native", testLine{name: "wait_pipe"})))
	s.Values().Append(40_000_000)
	s.AttributeIndices().Append(w.attrInt("thread.id", 102), w.attrStr("thread.name", "app"),
		w.attrStr(conventions.OffCPUReason, conventions.OffCPUReasonBlocked))
	p.MarkReadOnly()

	dir := filepath.Join(t.TempDir(), "profiles")
	exp := startExporter(t, &Config{Directory: dir, MaxFiles: 5})
	if err := exp.ConsumeProfiles(context.Background(), p); err != nil {
		t.Fatalf("ConsumeProfiles: %v", err)
	}
	path := filepath.Join(dir, latestName)
	out := parseFile(t, path)
	var types []string
	for _, st := range out.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if strings.Join(types, " ") != "samples/count off_cpu/nanoseconds" {
		t.Fatalf("sample types %v, want samples/count and off_cpu/nanoseconds", types)
	}
	if len(out.Sample) != 2 {
		t.Fatalf("%d samples, want 2", len(out.Sample))
	}
	for _, smp := range out.Sample {
		leaf := smp.Location[0].Line[0].Function.Name
		switch leaf {
		case "spin":
			if smp.Value[0] != 7 || smp.Value[1] != 0 {
				t.Errorf("on-CPU sample values %v, want [7 0]", smp.Value)
			}
		case "__schedule":
			if smp.Value[0] != 0 || smp.Value[1] != 40_000_000 || smp.Label[conventions.OffCPUReason][0] != "blocked" {
				t.Errorf("off-CPU sample values %v labels %v, want [0 40000000] and blocked", smp.Value, smp.Label)
			}
		default:
			t.Errorf("unexpected sample at %s", leaf)
		}
	}

	// What a user types: each index shows only its own samples.
	gotool := testenv.LookPath(t, "go")
	top := func(index string) string {
		cmd := exec.Command(gotool, "tool", "pprof", "-sample_index="+index, "-top", path)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -sample_index=%s: %v\n%s", index, err, b)
		}
		return string(b)
	}
	if got := top("off_cpu"); !strings.Contains(got, "wait_pipe") || !strings.Contains(got, "40ms") || strings.Contains(got, "spin") {
		t.Errorf("-sample_index=off_cpu shows:\n%s\nwant wait_pipe's 40ms and no spin", got)
	}
	if got := top("samples"); !strings.Contains(got, "spin") || strings.Contains(got, "wait_pipe") {
		t.Errorf("-sample_index=samples shows:\n%s\nwant spin and no wait_pipe", got)
	}
}
