package aggregate

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonicClock converts bpf_ktime_get_ns (CLOCK_MONOTONIC) to Unix time
// with an offset refreshed every interval, so wall-clock steps are followed.
type monotonicClock struct {
	offset int64
}

func (c *monotonicClock) refresh() {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return
	}
	c.offset = time.Now().UnixNano() - ts.Nano()
}

func (c *monotonicClock) unixNanos(ktime uint64) uint64 {
	return uint64(int64(ktime) + c.offset)
}
