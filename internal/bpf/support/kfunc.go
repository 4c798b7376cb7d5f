package support

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// Kfunc requires the kfunc fn in the kernel's BTF. The probe loads
// nothing, so it needs no capability.
func Kfunc(name, fn string) Requirement {
	return Requirement{Name: name, check: func(name string) error {
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			return fmt.Errorf("kernel feature missing: %s: reading kernel BTF: %w", name, err)
		}
		var f *btf.Func
		if err := spec.TypeByName(fn, &f); err != nil {
			return fmt.Errorf("kernel feature missing: %s: %w", name, err)
		}
		return nil
	}}
}
