package support

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ExplainPermission names the likely cause of EPERM/EACCES from bpf() or
// perf_event_open(); other errors pass through.
func ExplainPermission(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w (needs CAP_BPF and CAP_PERFMON, or root; check kernel.perf_event_paranoid and kernel.unprivileged_bpf_disabled)", err)
	}
	return err
}
