package ebpfprofreceiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// TestUnusableCacheDirKeepsLocalDebugFiles profiles a stripped build whose
// debug file sits in a configured debug directory, with a cache_dir that
// is a link (refused). The refused cache only turns fetching off: the
// stripped binary's frames are still named from the local debug file, and
// the warning names the directory.
func TestUnusableCacheDirKeepsLocalDebugFiles(t *testing.T) {
	testenv.RequireBPF(t)
	requireTool(t, "objcopy")
	requireTool(t, "gcc")
	build, runDir, debugDir := t.TempDir(), t.TempDir(), t.TempDir()
	src, _ := filepath.Abs("../../internal/symbolize/testdata/cinline/main.c")
	full := filepath.Join(build, "cinline")
	runTool(t, "", "gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", full, src)
	stripped := filepath.Join(runDir, "cinline")
	runTool(t, "", "objcopy", "--strip-all", full, stripped)
	id := gnuBuildID(t, stripped)
	dbg := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	runTool(t, "", "objcopy", "--only-keep-debug", full, dbg)

	realCache := t.TempDir()
	linkCache := filepath.Join(t.TempDir(), "cache")
	if err := os.Symlink(realCache, linkCache); err != nil {
		t.Fatal(err)
	}

	core, logs := observer.New(zapcore.WarnLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig().(*Config)
	cfg.SamplingFrequency = 199
	cfg.ReportInterval = time.Second
	cfg.Symbolizer.CacheDir = linkCache
	cfg.Symbolizer.DebugDirectories = []string{debugDir}
	r, err := newProfilesReceiver(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	testworkload.Start(t, stripped, "spin")
	time.Sleep(4 * time.Second)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	warned := false
	for _, e := range logs.All() {
		t.Logf("warning: %s %v", e.Message, e.ContextMap())
		if strings.Contains(fmt.Sprint(e.ContextMap()), linkCache) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning names the refused cache_dir %s", linkCache)
	}
	var named, unnamed int
	for _, frames := range workloadFrames(sink.AllProfiles(), stripped) {
		for _, f := range frames {
			if len(f.lines) > 0 {
				named++
			} else {
				unnamed++
			}
		}
	}
	t.Logf("%s: %d frames named, %d unnamed", filepath.Base(stripped), named, unnamed)
	if named == 0 {
		t.Errorf("no frame of the stripped binary named from %s with cache_dir refused", dbg)
	}
}

// TestDebuginfodWithoutCacheDirWarns starts the receiver with a debuginfod
// server but no cache_dir, in an environment without $HOME or
// $XDG_CACHE_HOME to default to (a service manager's): nothing can be
// fetched, and the receiver says so instead of ignoring the server.
func TestDebuginfodWithoutCacheDirWarns(t *testing.T) {
	testenv.RequireBPF(t)
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	core, logs := observer.New(zapcore.WarnLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.Symbolizer.Debuginfod.URLs = []string{"http://127.0.0.1:1"}
	r, err := newProfilesReceiver(set, cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range logs.All() {
		t.Logf("warning: %s %v", e.Message, e.ContextMap())
		if strings.Contains(e.Message, "debuginfod") && strings.Contains(e.Message, "cache_dir") {
			warned = true
		}
	}
	if !warned {
		t.Error("no warning that the debuginfod server is not used for want of a cache directory")
	}
}
