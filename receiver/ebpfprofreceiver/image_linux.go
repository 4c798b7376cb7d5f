package ebpfprofreceiver

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/process"
)

// pageOutImage has the kernel reclaim the pages of the collector's own
// executable mapped read-only (code, read-only data). Start-up runs the
// init code of every package and reads much of the read-only data once;
// those pages otherwise stay in the RSS (30 of bin/bpfcol's 36 MB of file
// pages, of which about 15 MB are used again afterwards). Pages used later
// fault back in; the writable data is left alone. It returns the bytes of
// the mappings advised.
func pageOutImage() (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return 0, fmt.Errorf("paging out the executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("paging out the executable: %w", err)
	}
	maps, err := process.ParseMappings(f)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("paging out the executable: %w", err)
	}
	var advised int64
	for _, m := range maps {
		if !imageMapping(&m, uint64(st.Dev), uint64(st.Ino)) {
			continue
		}
		// MADV_PAGEOUT reclaims clean file pages and never discards
		// data: a page it cannot reclaim stays.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), unix.MADV_PAGEOUT); errno != 0 {
			return advised, fmt.Errorf("paging out the executable at %#x: %w", m.Start, errno)
		}
		advised += int64(m.End - m.Start)
	}
	return advised, nil
}

// imageMapping reports whether m maps the file dev/ino read-only and
// private.
func imageMapping(m *process.Mapping, dev, ino uint64) bool {
	return (m.Perms == "r-xp" || m.Perms == "r--p") && m.Dev == dev && m.Inode == ino && m.End > m.Start
}
