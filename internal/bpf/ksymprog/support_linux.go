//go:build linux && (amd64 || arm64)

package ksymprog

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfcol/bpfcol/internal/bpf/capability"
	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

// CheckSupport reports, by name, the first capability or kernel feature the
// formatter needs and does not have. bpf_snprintf is a CAP_PERFMON helper:
// without it the verifier refuses the program.
func CheckSupport() error {
	return support.Check(
		support.Capabilities("bpf_snprintf needs CAP_PERFMON, loading needs CAP_BPF", capability.BPF, capability.Perfmon),
		support.ProgramType("syscall BPF programs (kernel 5.14)", ebpf.Syscall),
		support.Helper("helper bpf_snprintf (kernel 5.13)", ebpf.Syscall, asm.FnSnprintf),
		support.Helper("helper bpf_loop (kernel 5.17)", ebpf.Syscall, asm.FnLoop),
	)
}
