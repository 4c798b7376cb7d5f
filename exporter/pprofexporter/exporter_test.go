package pprofexporter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// handBuiltProfiles returns two processes sharing one dictionary:
//   - pid 100 (cpuhog): a kernel frame, then leaf inlined into middle at one
//     location, then main; GNU build id only.
//   - pid 200 (gohog): a kernel frame without a mapping, main.leaf in a
//     binary with both build ids, main.main in one with only a Go build id.
func handBuiltProfiles(start pcommon.Timestamp) pprofile.Profiles {
	p := pprofile.NewProfiles()
	w := newDictWriter(p)
	kernel := w.mapping(testMapping{file: "[kernel.kallsyms]"})
	cpuhog := w.mapping(testMapping{file: "/usr/bin/cpuhog", start: 0x5555_0000_0000, limit: 0x5555_0000_2000, offset: 0x1000, gnu: "0a1b2c3d"})
	gohog := w.mapping(testMapping{file: "/usr/bin/gohog", start: 0x40_0000, limit: 0x50_0000, gnu: "feedface", goID: "go-a/go-b/go-c/go-d"})
	goOnly := w.mapping(testMapping{file: "/usr/lib/goplugin.so", start: 0x7f00_0000_0000, limit: 0x7f00_0010_0000, goID: "only-go/id"})

	const period = int64(1e9) / 99
	prof := w.newTestProfile(p, 100, "cpuhog", period, start)
	w.sample(prof, w.stack(
		w.location(kernel, 0xffff_ffff_8100_0010, "kernel", testLine{name: "asm_sysvec_apic_timer_interrupt"}),
		w.location(cpuhog, 0x1139, "native",
			testLine{name: "leaf", file: "cpuhog.c", line: 7},
			testLine{name: "middle", file: "cpuhog.c", line: 14}),
		w.location(cpuhog, 0x1160, "native", testLine{name: "main", file: "cpuhog.c", line: 21}),
	), 7, 101, "cpuhog")

	prof = w.newTestProfile(p, 200, "gohog", period, start+pcommon.Timestamp(time.Second))
	w.sample(prof, w.stack(
		w.location(0, 0xffff_ffff_8100_0020, "kernel", testLine{name: "do_syscall_64"}),
		w.location(gohog, 0x45_0000, "go", testLine{name: "main.leaf", file: "main.go", line: 9}),
		w.location(goOnly, 0x7f00_0000_1000, "go", testLine{name: "main.main", file: "main.go", line: 30}),
	), 3, 201, "gohog")
	return p
}

// startExporter creates and starts the exporter through its factory.
func startExporter(t *testing.T, cfg *Config) xexporter.Profiles {
	t.Helper()
	f := NewFactory().(xexporter.Factory)
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(typ), cfg)
	if err != nil {
		t.Fatalf("creating the exporter: %v", err)
	}
	if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatalf("starting the exporter: %v", err)
	}
	t.Cleanup(func() {
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Errorf("shutting down the exporter: %v", err)
		}
	})
	return exp
}

func parseFile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("pprof cannot parse %s: %v", path, err)
	}
	return p
}

// exportFiles lists the per-export files in dir, oldest first.
func exportFiles(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, exportPrefix+"*"+exportSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(matches)
	return matches
}

func names(loc *profile.Location) []string {
	var out []string
	for _, l := range loc.Line {
		out = append(out, l.Function.Name)
	}
	return out
}

func sampleOfPID(t *testing.T, p *profile.Profile, pid int64) *profile.Sample {
	t.Helper()
	for _, s := range p.Sample {
		if slices.Equal(s.NumLabel["pid"], []int64{pid}) {
			return s
		}
	}
	t.Fatalf("no sample labelled pid=%d", pid)
	return nil
}

func TestExportWritesPprof(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "profiles")
	exp := startExporter(t, &Config{Directory: dir, MaxFiles: 5})
	start := pcommon.NewTimestampFromTime(time.Unix(1_700_000_000, 0))
	pd := handBuiltProfiles(start)
	pd.MarkReadOnly()
	if err := exp.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatalf("ConsumeProfiles: %v", err)
	}

	files := exportFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("got per-export files %v, want exactly one", files)
	}
	perExport, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	latest, err := os.ReadFile(filepath.Join(dir, latestName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(perExport, latest) {
		t.Errorf("%s and %s differ", files[0], latestName)
	}
	if fi, err := os.Stat(filepath.Join(dir, latestName)); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("latest.pb.gz mode = %v (%v), want 0644 so other users can open it", fi.Mode(), err)
	}

	p := parseFile(t, filepath.Join(dir, latestName))
	if len(p.SampleType) != 1 || p.SampleType[0].Type != "samples" || p.SampleType[0].Unit != "count" {
		t.Errorf("sample types = %v, want [samples/count]", p.SampleType)
	}
	if p.PeriodType == nil || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" || p.Period != int64(1e9)/99 {
		t.Errorf("period = %v %d, want cpu/nanoseconds %d", p.PeriodType, p.Period, int64(1e9)/99)
	}
	if p.TimeNanos != int64(start) || p.DurationNanos != int64(6*time.Second) {
		t.Errorf("time = %d + %d, want %d + %d", p.TimeNanos, p.DurationNanos, int64(start), int64(6*time.Second))
	}
	if len(p.Sample) != 2 {
		t.Fatalf("got %d samples, want 2 (one per process)", len(p.Sample))
	}

	c := sampleOfPID(t, p, 100)
	if !slices.Equal(c.Value, []int64{7}) {
		t.Errorf("cpuhog sample value = %v, want [7]", c.Value)
	}
	wantLabels := map[string][]string{"process": {"cpuhog"}, "thread": {"cpuhog"}, "container.id": {"c0ffee"}}
	for k, v := range wantLabels {
		if !slices.Equal(c.Label[k], v) {
			t.Errorf("cpuhog label %s = %v, want %v", k, c.Label[k], v)
		}
	}
	if !slices.Equal(c.NumLabel["tid"], []int64{101}) {
		t.Errorf("cpuhog tid label = %v, want [101]", c.NumLabel["tid"])
	}
	if len(c.Location) != 3 {
		t.Fatalf("cpuhog stack has %d locations, want 3", len(c.Location))
	}
	if got := names(c.Location[0]); !slices.Equal(got, []string{"asm_sysvec_apic_timer_interrupt"}) || c.Location[0].Mapping.File != "[kernel.kallsyms]" {
		t.Errorf("kernel frame = %v in %+v", got, c.Location[0].Mapping)
	}
	// pprof: the last line is the caller the earlier ones were inlined into.
	inl := c.Location[1]
	if got := names(inl); !slices.Equal(got, []string{"leaf", "middle"}) {
		t.Errorf("inlined location lines = %v, want [leaf middle]", got)
	}
	if inl.Line[0].Line != 7 || inl.Line[1].Line != 14 || inl.Line[0].Function.Filename != "cpuhog.c" {
		t.Errorf("inlined location lines = %+v", inl.Line)
	}
	if m := inl.Mapping; m.File != "/usr/bin/cpuhog" || m.BuildID != "0a1b2c3d" || m.Start != 0x5555_0000_0000 || m.Limit != 0x5555_0000_2000 || m.Offset != 0x1000 {
		t.Errorf("cpuhog mapping = %+v", m)
	} else if !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers || !m.HasInlineFrames {
		t.Errorf("cpuhog mapping flags = %+v, want all set", m)
	}
	if got := names(c.Location[2]); !slices.Equal(got, []string{"main"}) || c.Location[2].Address != 0x1160 {
		t.Errorf("outer frame = %v at %#x", got, c.Location[2].Address)
	}

	g := sampleOfPID(t, p, 200)
	if !slices.Equal(g.Value, []int64{3}) || !slices.Equal(g.Label["process"], []string{"gohog"}) || !slices.Equal(g.NumLabel["tid"], []int64{201}) {
		t.Errorf("gohog sample = %v %v %v", g.Value, g.Label, g.NumLabel)
	}
	if m := g.Location[0].Mapping; m == nil || m.File != "[kernel.kallsyms]" {
		t.Errorf("kernel frame without a mapping got mapping %+v, want [kernel.kallsyms]", m)
	}
	if m := g.Location[1].Mapping; m.BuildID != "feedface" {
		t.Errorf("mapping with both build ids has %q, want the GNU one", m.BuildID)
	}
	if m := g.Location[2].Mapping; m.BuildID != "only-go/id" {
		t.Errorf("mapping with only a Go build id has %q", m.BuildID)
	}
	var chain []string
	for _, loc := range g.Location {
		chain = append(chain, names(loc)...)
	}
	if !slices.Equal(chain, []string{"do_syscall_64", "main.leaf", "main.main"}) {
		t.Errorf("gohog chain = %v", chain)
	}
}

func TestEmptyExportWritesNothing(t *testing.T) {
	dir := t.TempDir()
	exp := startExporter(t, &Config{Directory: dir, MaxFiles: 5})
	if err := exp.ConsumeProfiles(context.Background(), pprofile.NewProfiles()); err != nil {
		t.Fatalf("ConsumeProfiles: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("an export without samples wrote %v", entries)
	}
}

func TestStartFailsOnUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := NewFactory().(xexporter.Factory)
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(typ), &Config{Directory: filepath.Join(file, "sub"), MaxFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = exp.Start(context.Background(), componenttest.NewNopHost())
	if err == nil || !strings.Contains(err.Error(), "creating the profiles directory") {
		t.Errorf("Start = %v, want an error creating the directory", err)
	}
	_ = exp.Shutdown(context.Background())
}
