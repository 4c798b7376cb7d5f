package loader

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// identity tells a process from a later one with the same pid (start time)
// and from itself before an exec (executable file).
func identity(pid uint32) (procIdentity, error) {
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procIdentity{}, fmt.Errorf("reading stat of pid %d: %w", pid, err)
	}
	// Fields after the command, which may hold spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return procIdentity{}, fmt.Errorf("parsing stat of pid %d: no command", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return procIdentity{}, fmt.Errorf("parsing stat of pid %d: %d fields", pid, len(fields))
	}
	id := procIdentity{startTime: fields[19]}
	fi, err := os.Stat(dir + "/exe")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procIdentity{}, fmt.Errorf("reading executable of pid %d: %w", pid, err)
		}
		return id, nil // a kernel thread or no permission: start time only
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.exeDev, id.exeIno = st.Dev, st.Ino
	}
	return id, nil
}
