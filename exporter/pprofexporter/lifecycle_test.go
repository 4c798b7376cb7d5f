package pprofexporter

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// TestProfilesLifecycle stands in for the lifecycle test mdatagen does not
// generate for profiles exporters: two exporters on one directory, each
// started, fed and shut down in turn.
func TestProfilesLifecycle(t *testing.T) {
	cfg := &Config{Directory: filepath.Join(t.TempDir(), "out"), MaxFiles: 2}
	f := NewFactory().(xexporter.Factory)
	for i := range 2 {
		exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(typ), cfg)
		if err != nil {
			t.Fatalf("run %d: creating: %v", i, err)
		}
		if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatalf("run %d: starting: %v", i, err)
		}
		pd := handBuiltProfiles(pcommon.NewTimestampFromTime(time.Now()))
		if !exp.Capabilities().MutatesData {
			pd.MarkReadOnly()
		}
		if err := exp.ConsumeProfiles(context.Background(), pd); err != nil {
			t.Fatalf("run %d: consuming: %v", i, err)
		}
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Fatalf("run %d: shutting down: %v", i, err)
		}
	}
	if got := exportFiles(t, cfg.Directory); len(got) != 2 {
		t.Errorf("two runs left %v, want two files", got)
	}
	// Shutdown without Start must work too.
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(typ), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown before start: %v", err)
	}
}
