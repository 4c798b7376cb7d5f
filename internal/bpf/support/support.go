// Package support checks, before anything is loaded, that the process has
// the capabilities and the kernel the features a BPF component needs, and
// names the first one missing.
package support

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
)

// Requirement is one thing a component needs, checked by Check.
type Requirement struct {
	// Name names the requirement in errors, with the kernel version that
	// brought it where that helps.
	Name  string
	check func(name string) error
}

// Capabilities requires every one of caps; why says what they are for.
func Capabilities(why string, caps ...capability.Cap) Requirement {
	return Requirement{Name: why, check: func(why string) error {
		missing, err := capability.Missing(caps...)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			return nil
		}
		names := make([]string, len(missing))
		for i, c := range missing {
			names[i] = c.String()
		}
		return fmt.Errorf("missing capability %s (%s; run as root or grant it)", strings.Join(names, ", "), why)
	}}
}

// kernelTypes is the kernel's BTF shared by the checks and the loads of a
// start: parsing it costs about 10 ms of CPU, and without a shared cache
// every check and every collection load parses it again.
var kernelTypes struct {
	sync.Mutex
	cache *btf.Cache
}

// KernelTypes returns the cache of the kernel's BTF that the checks use and
// that every load at start passes as ebpf.CollectionOptions.Cache, so the
// kernel's BTF is parsed once for all of them.
func KernelTypes() *btf.Cache {
	kernelTypes.Lock()
	defer kernelTypes.Unlock()
	if kernelTypes.cache == nil {
		kernelTypes.cache = btf.NewCache()
	}
	return kernelTypes.cache
}

// ReleaseKernelTypes drops the shared kernel BTF once a start has loaded
// its objects, so its memory goes when the last load using it is done; a
// later KernelTypes parses it anew.
func ReleaseKernelTypes() {
	kernelTypes.Lock()
	kernelTypes.cache = nil
	kernelTypes.Unlock()
}

// KernelBTF requires /sys/kernel/btf/vmlinux, which CO-RE relocates against.
var KernelBTF = Requirement{Name: "kernel BTF", check: func(string) error {
	if _, err := KernelTypes().Kernel(); err != nil {
		return fmt.Errorf("kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) is not available: %w", err)
	}
	return nil
}}

// ProgramType requires BPF programs of type pt.
func ProgramType(name string, pt ebpf.ProgramType) Requirement {
	return feature(name, func() error { return features.HaveProgramType(pt) })
}

// MapType requires BPF maps of type mt.
func MapType(name string, mt ebpf.MapType) Requirement {
	return feature(name, func() error { return features.HaveMapType(mt) })
}

// Helper requires helper fn in programs of type pt.
func Helper(name string, pt ebpf.ProgramType, fn asm.BuiltinFunc) Requirement {
	return feature(name, func() error { return features.HaveProgramHelper(pt, fn) })
}

func feature(name string, probe func() error) Requirement {
	return Requirement{Name: name, check: func(name string) error {
		err := probe()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			return fmt.Errorf("kernel feature missing: %s: %w", name, err)
		default:
			return fmt.Errorf("probing kernel feature %s: %w", name, err)
		}
	}}
}

// Check checks reqs in order and returns the first one missing.
func Check(reqs ...Requirement) error {
	for _, r := range reqs {
		if err := r.check(r.Name); err != nil {
			return err
		}
	}
	return nil
}
