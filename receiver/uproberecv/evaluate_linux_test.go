package uproberecv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// TestGuardFaultsTruncatedFile reads a mapped file truncated under it, as
// the writer of a file in a watched directory can do while bpfcol reads
// it: the fault is an error, not a crash; other panics go on.
func TestGuardFaultsTruncatedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var b byte
	if err := guardFaults(func() { b = data[1<<15] }); !errors.Is(err, errFileShrank) {
		t.Fatalf("reading a truncated mapping: %v (read %d), want %v", err, b, errFileShrank)
	}
	if err := guardFaults(func() {}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != "other" {
			t.Fatalf("recovered %v, want the other panic passed on", r)
		}
	}()
	_ = guardFaults(func() { panic("other") })
}

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
