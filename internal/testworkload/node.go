package testworkload

import (
	"os"
	"path"
	"path/filepath"
	"testing"
)

// NodeScript writes the named script under src/node to a temp dir and
// returns its path.
func NodeScript(t testing.TB, name string) string {
	t.Helper()
	src, err := sources.ReadFile(path.Join("src", "node", name))
	if err != nil {
		t.Fatalf("reading node script %q: %v", name, err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, src, 0o644); err != nil {
		t.Fatalf("writing node script: %v", err)
	}
	return p
}
