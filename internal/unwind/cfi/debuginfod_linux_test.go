//go:build linux

package cfi

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
	"github.com/bpfcol/bpfcol/internal/testdebuginfod"
)

// TestStoreDebuginfod wires the store's debug-file hook to the
// symbolizer, as the receiver does: a stripped binary whose CFI is only in
// .debug_frame gets its table from the debug file that a real debuginfod
// serves, first reported pending, then complete.
func TestStoreDebuginfod(t *testing.T) {
	srv, runDir := t.TempDir(), t.TempDir()
	flags := append([]string{"-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wl,--build-id"}, optFlags...)
	full := build(t, "gcc", "chain-debug", flags, "chain.c")
	served := filepath.Join(srv, "chain-debug")
	stripped := filepath.Join(runDir, "chain-debug")
	for _, args := range [][]string{{full, served}, {"--strip-debug", full, stripped}} {
		out, err := exec.Command("objcopy", args...).CombinedOutput()
		require.NoError(t, err, "objcopy %v: %s", args, out)
	}
	id := elfbin.GNUBuildID(mustOpenELF(t, stripped))
	require.NotEmpty(t, id)

	url := testdebuginfod.Start(t, srv, id)
	sym, err := symbolize.NewSymbolizer(symbolize.SymbolizerConfig{
		SystemDebugDir: t.TempDir(),
		CacheDir:       t.TempDir(),
		Debuginfod:     debuginfod.Config{URLs: []string{url}, Timeout: 30 * time.Second},
		Getenv:         func(string) string { return "" },
	})
	require.NoError(t, err)
	defer sym.Close()

	onBuilt, built := waitBuilt()
	s := NewStore[string](StoreConfig{
		MaxBytes:   1 << 20,
		QueueLen:   4,
		RetryAfter: time.Nanosecond,
		DebugFile: func(buildID string) (*os.File, error) {
			f, pending, err := sym.OpenDebugFile(buildID)
			if pending {
				return nil, ErrPending
			}
			return f, err
		},
	}, onBuilt)
	defer s.Close()

	require.True(t, s.Request("bin", opener(stripped)))
	recvKey(t, built)
	e, ok := s.Get("bin")
	require.True(t, ok)
	require.ErrorIs(t, e.Err, ErrPending, "the first build starts the download")

	want := compileFile(t, full, FromELF)
	deadline := time.Now().Add(time.Minute)
	for errorsIsPending(e) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		require.True(t, s.Request("bin", opener(stripped)))
		recvKey(t, built)
		e, _ = s.Get("bin")
	}
	require.NoError(t, e.Err)
	require.Equal(t, want.Rows, e.Table.Rows)
}

func errorsIsPending(e *Entry) bool { return errors.Is(e.Err, ErrPending) }

func mustOpenELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}
