// Package capability tells which Linux capabilities the process lacks, so a
// component that cannot start can name exactly what is missing.
package capability

import "fmt"

// Cap is a Linux capability number (include/uapi/linux/capability.h).
type Cap uint

// Capabilities bpfcol needs.
const (
	SysAdmin          Cap = 21
	SysPtrace         Cap = 19
	DacReadSearch     Cap = 2
	SysResource       Cap = 24
	Perfmon           Cap = 38
	BPF               Cap = 39
	CheckpointRestore Cap = 40
)

var names = map[Cap]string{
	SysAdmin:          "CAP_SYS_ADMIN",
	SysPtrace:         "CAP_SYS_PTRACE",
	DacReadSearch:     "CAP_DAC_READ_SEARCH",
	SysResource:       "CAP_SYS_RESOURCE",
	Perfmon:           "CAP_PERFMON",
	BPF:               "CAP_BPF",
	CheckpointRestore: "CAP_CHECKPOINT_RESTORE",
}

// String returns the capability's name, such as "CAP_BPF".
func (c Cap) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("CAP_%d", uint(c))
}
