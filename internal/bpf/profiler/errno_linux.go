package profiler

import "golang.org/x/sys/unix"

const (
	unixEPERM  = unix.EPERM
	unixEACCES = unix.EACCES
)
