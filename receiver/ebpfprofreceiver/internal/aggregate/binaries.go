package aggregate

import (
	"os"

	"github.com/bpfcol/bpfcol/internal/process"
)

// Binaries opens the binaries samples are in and keeps them beyond their
// processes: the symbolizer's binary cache, handed in by the receiver, so
// each binary is opened and indexed once for the leaf analysis and for
// naming.
type Binaries interface {
	// Open returns the binary of file key, opened through open unless it
	// is held already. The caller releases it.
	Open(key process.FileKey, open func() (*os.File, error)) (Binary, error)
}

// Binary is one open binary, as the leaf analysis reads its code.
type Binary interface {
	// ID names the binary's build: copies of one build share it, and so
	// share their analyses.
	ID() uint64
	// FunctionAt returns the virtual address of file offset off and the
	// bounds [start, end) of the function holding it; false when the
	// offset maps to no address or no function holds it.
	FunctionAt(off uint64) (pc, start, end uint64, ok bool)
	// ReadCode reads n bytes of code at virtual address addr.
	ReadCode(addr uint64, n int) ([]byte, error)
	// Release lets the binary go; it is not used after.
	Release()
}
