package interp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// readRemote reads with process_vm_readv: one system call, no ptrace
// stop, and no file descriptor kept on the process.
func readRemote(pid int, addr uint64, buf []byte) error {
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("read %d of %d bytes", n, len(buf))
	}
	return nil
}
