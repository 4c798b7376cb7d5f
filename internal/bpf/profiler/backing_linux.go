//go:build linux && (amd64 || arm64)

package profiler

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelRelease is the running kernel's release ("6.18.44-..."), "" if
// unknown.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// fmodeBacking returns FMODE_BACKING for the kernel release, for the
// sampler to name an overlayfs file as /proc/PID/maps does: 0 before 6.8,
// where /proc/PID/maps shows a mapped file's own inode (BPF then reads
// that one); 1 << 25 until 6.13; 1 << 24 from 6.14, where the fanotify
// bits moved it. Macros are not in BTF: the release is the only source.
func fmodeBacking(release string) uint32 {
	major, rest, _ := strings.Cut(release, ".")
	minor, _, _ := strings.Cut(rest, ".")
	minor, _, _ = strings.Cut(minor, "-")
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(minor)
	switch {
	case err1 != nil || err2 != nil:
		return 0
	case maj > 6 || maj == 6 && mnr >= 14:
		return 1 << 24
	case maj == 6 && mnr >= 8:
		return 1 << 25
	}
	return 0
}
