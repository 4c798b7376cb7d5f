package ebpfprofreceiver

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
	defer f.Close()
	var advised int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, ok := imageMapping(sc.Text(), uint64(st.Dev), uint64(st.Ino))
		if !ok {
			continue
		}
		// MADV_PAGEOUT reclaims clean file pages and never discards
		// data: a page it cannot reclaim stays.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT); errno != 0 {
			return advised, fmt.Errorf("paging out the executable at %#x: %w", start, errno)
		}
		advised += int64(end - start)
	}
	if err := sc.Err(); err != nil {
		return advised, fmt.Errorf("paging out the executable: %w", err)
	}
	return advised, nil
}

// imageMapping parses a line of /proc/self/maps ("start-end perms offset
// major:minor inode path") and reports whether it maps the file dev/ino
// read-only and private.
func imageMapping(line string, dev, ino uint64) (start, end uint64, ok bool) {
	fl := strings.Fields(line)
	if len(fl) < 6 || (fl[1] != "r-xp" && fl[1] != "r--p") {
		return 0, 0, false
	}
	if in, err := strconv.ParseUint(fl[4], 10, 64); err != nil || in != ino {
		return 0, 0, false
	}
	maj, min, ok1 := strings.Cut(fl[3], ":")
	mj, err1 := strconv.ParseUint(maj, 16, 32)
	mn, err2 := strconv.ParseUint(min, 16, 32)
	if !ok1 || err1 != nil || err2 != nil || unix.Mkdev(uint32(mj), uint32(mn)) != dev {
		return 0, 0, false
	}
	lo, hi, ok2 := strings.Cut(fl[0], "-")
	start, err1 = strconv.ParseUint(lo, 16, 64)
	end, err2 = strconv.ParseUint(hi, 16, 64)
	if !ok2 || err1 != nil || err2 != nil || end <= start {
		return 0, 0, false
	}
	return start, end, true
}
