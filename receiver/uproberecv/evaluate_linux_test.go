package uproberecv

import (
	"context"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// TestMissingBinaryWarnedOnce starts the receiver with a binary: probe on a
// path that does not exist: one warning names it, with the probe and how
// it gets attached later, not one from the configuration check and a
// second from the attach at start.
func TestMissingBinaryWarnedOnce(t *testing.T) {
	testenv.RequireBPF(t)
	missing := filepath.Join(t.TempDir(), "not-there")
	cfg := createDefaultConfig().(*Config)
	cfg.Probes = []ProbeConfig{{ID: "later", Binary: missing, Entry: "f"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	r, err := newLogsReceiver(set, cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componentHost{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		m := e.ContextMap()
		if m["binary"] == missing || m["path"] == missing {
			warned = append(warned, e.Message)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d warnings about %s, want 1: %q", len(warned), missing, warned)
	}
}
