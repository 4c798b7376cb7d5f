package support

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

func TestCheckNamesFirstMissing(t *testing.T) {
	calls := 0
	ok := feature("present", func() error { calls++; return nil })
	missing := feature("helper bpf_thing (kernel 9.9)", func() error {
		calls++
		return fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
	})
	broken := feature("later", func() error { calls++; return errors.New("EPERM") })
	err := Check(ok, missing, broken)
	if err == nil || !strings.Contains(err.Error(), "kernel feature missing: helper bpf_thing (kernel 9.9)") || !errors.Is(err, ebpf.ErrNotSupported) {
		t.Fatalf("got %v", err)
	}
	if calls != 2 {
		t.Fatalf("%d probes ran, want 2: checking stops at the first missing", calls)
	}
	if err := Check(ok, broken); err == nil || !strings.Contains(err.Error(), "probing kernel feature later: EPERM") {
		t.Fatalf("a probe that fails otherwise: got %v", err)
	}
	if err := Check(); err != nil {
		t.Fatal(err)
	}
}

// TestArchitectureNamesWhatAndWhere: a component that runs on some
// architectures only says which, and on which it was asked to run.
func TestArchitectureNamesWhatAndWhere(t *testing.T) {
	if err := Check(architecture("the stack walk", "amd64", "amd64")); err != nil {
		t.Fatalf("on amd64: %v", err)
	}
	err := Check(architecture("the stack walk", "arm64", "amd64"))
	if !errors.Is(err, ErrArchitecture) || err.Error() != "the stack walk runs on amd64 only, not on arm64: architecture not supported" {
		t.Fatalf("on arm64: %v", err)
	}
}
