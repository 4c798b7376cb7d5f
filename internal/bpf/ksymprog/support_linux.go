package ksymprog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
)

// CheckSupport reports, by name, the first capability or kernel feature the
// formatter needs and does not have. bpf_snprintf is a CAP_PERFMON helper:
// without it the verifier refuses the program.
func CheckSupport() error {
	missing, err := capability.Missing(capability.BPF, capability.Perfmon)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, c := range missing {
			names[i] = c.String()
		}
		return fmt.Errorf("missing capability %s (bpf_snprintf needs CAP_PERFMON, loading needs CAP_BPF)", strings.Join(names, ", "))
	}
	checks := []struct {
		name string
		err  func() error
	}{
		{"syscall BPF programs (kernel 5.14)", func() error { return features.HaveProgramType(ebpf.Syscall) }},
		{"helper bpf_snprintf (kernel 5.13)", func() error { return features.HaveProgramHelper(ebpf.Syscall, asm.FnSnprintf) }},
		{"helper bpf_loop (kernel 5.17)", func() error { return features.HaveProgramHelper(ebpf.Syscall, asm.FnLoop) }},
	}
	for _, c := range checks {
		if err := c.err(); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("kernel feature missing: %s: %w", c.name, err)
			}
			return fmt.Errorf("probing kernel feature %s: %w", c.name, err)
		}
	}
	return nil
}
