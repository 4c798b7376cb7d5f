package support

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// BTFTracepoint requires the BTF tracepoint tp (a tp_btf program's target)
// with at least args arguments: its btf_trace_<tp> typedef in the kernel's
// BTF, whose function takes the context and then the tracepoint's
// arguments. The probe loads nothing, so it needs no capability.
func BTFTracepoint(name, tp string, args int) Requirement {
	return Requirement{Name: name, check: func(name string) error {
		spec, err := KernelTypes().Kernel()
		if err != nil {
			return fmt.Errorf("kernel feature missing: %s: reading kernel BTF: %w", name, err)
		}
		var td *btf.Typedef
		if err := spec.TypeByName("btf_trace_"+tp, &td); err != nil {
			return fmt.Errorf("kernel feature missing: %s: %w", name, err)
		}
		ptr, ok := td.Type.(*btf.Pointer)
		if !ok {
			return fmt.Errorf("kernel feature missing: %s: btf_trace_%s is %s, not a function pointer", name, tp, td.Type)
		}
		proto, ok := ptr.Target.(*btf.FuncProto)
		if !ok || len(proto.Params) < args+1 {
			return fmt.Errorf("kernel feature missing: %s: tracepoint %s takes fewer than %d arguments", name, tp, args)
		}
		return nil
	}}
}
