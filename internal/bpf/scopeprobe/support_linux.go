//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

// CheckSupport reports, by name, the first capability or kernel feature the
// scope probes need and do not have.
func CheckSupport() error {
	return support.Check(
		support.Capabilities("loading needs CAP_BPF, uprobes CAP_PERFMON", capability.BPF, capability.Perfmon),
		support.KernelBTF,
		support.ProgramType("kprobe/uprobe BPF programs", ebpf.Kprobe),
		support.MapType("BPF ringbuf maps (kernel 5.8)", ebpf.RingBuf),
		support.MapType("LRU hash maps", ebpf.LRUHash),
		support.Helper("helper bpf_get_attach_cookie (kernel 5.15)", ebpf.Kprobe, asm.FnGetAttachCookie),
	)
}

var explainPermission = support.ExplainPermission
