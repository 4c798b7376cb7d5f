//go:build !arm64

package process

// MaxUserAddr is the highest user address: x86-64's 47-bit virtual
// addresses with 4-level paging ([vsyscall] lies above).
const MaxUserAddr = 0x00007fffffffffff
