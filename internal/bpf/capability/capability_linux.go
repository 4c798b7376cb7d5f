package capability

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Effective reports whether c is in the calling thread's effective set.
func Effective(c Cap) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("reading capabilities: %w", err)
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// Missing returns those of caps that are not effective. CAP_SYS_ADMIN stands
// in for CAP_BPF and CAP_PERFMON, as it does in the kernel.
func Missing(caps ...Cap) ([]Cap, error) {
	admin, err := Effective(SysAdmin)
	if err != nil {
		return nil, err
	}
	var missing []Cap
	for _, c := range caps {
		if admin && (c == BPF || c == Perfmon) {
			continue
		}
		ok, err := Effective(c)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, c)
		}
	}
	return missing, nil
}
