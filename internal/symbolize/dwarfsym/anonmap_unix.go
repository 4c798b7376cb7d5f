//go:build unix

package dwarfsym

import "syscall"

// anonMap returns n bytes of zero pages, which take no memory until
// written.
func anonMap(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

func anonUnmap(b []byte) { _ = syscall.Munmap(b) }
