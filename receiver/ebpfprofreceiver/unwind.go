package ebpfprofreceiver

import (
	"os"

	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
	"github.com/bpfcol/bpfcol/internal/unwind/loader"
)

// unwindTables returns how a file's CFI table is built for the BPF
// unwinder.
func (r *profilesReceiver) unwindTables() loader.TableFunc {
	return func(symbolize.FileKey, func() (*os.File, error)) (*cfi.Table, error) { return nil, nil }
}
