package scopeprobe

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
)

// CheckSupport reports, by name, the first capability or kernel feature the
// scope probes need and do not have.
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
		return fmt.Errorf("missing capability %s (run as root or grant it)", strings.Join(names, ", "))
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) is not available: %w", err)
	}
	checks := []struct {
		name string
		err  func() error
	}{
		{"kprobe/uprobe BPF programs", func() error { return features.HaveProgramType(ebpf.Kprobe) }},
		{"BPF ringbuf maps (kernel 5.8)", func() error { return features.HaveMapType(ebpf.RingBuf) }},
		{"LRU hash maps", func() error { return features.HaveMapType(ebpf.LRUHash) }},
		{"helper bpf_get_attach_cookie (kernel 5.15)", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) }},
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

// explainPermission names the likely cause of EPERM/EACCES.
func explainPermission(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w (needs CAP_BPF and CAP_PERFMON, or root)", err)
	}
	return err
}
