package loader

import (
	"bytes"
	"debug/elf"
	"fmt"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// loadVDSO compiles the .eh_frame of the kernel's vDSO and hands it to the
// sink, once at start: every 64-bit process maps that one image, so the
// sampler keeps one table for all of them, the file profiler.VDSOFile
// that each process's vDSO mapping (profiler.MappingVDSO) names, outside
// the row store the tables of files share: never evicted. A failure is
// counted as a table error; the vDSO's frames are then walked by their
// frame pointers.
func (l *Loader) loadVDSO() {
	if err := loadVDSO(l.cfg.Sink); err != nil {
		l.tables.tableErr.Add(1)
	}
}

func loadVDSO(sink Sink) error {
	image, err := process.VDSOImage()
	if err != nil {
		return err
	}
	rows, err := vdsoRows(image)
	if err != nil {
		return err
	}
	return sink.SetUnwindVDSO(rows, rows[0].PC)
}

// vdsoRows compiles image's CFI with the rows' PCs moved from ELF
// addresses to offsets in the image: a process maps its first byte at the
// start of its vDSO mapping, the walk's file offset 0 there.
func vdsoRows(image []byte) ([]cfi.Row, error) {
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return nil, fmt.Errorf("reading the vDSO's ELF: %w", err)
	}
	addrs := elfbin.NewAddressMapper(f.Progs)
	if !addrs.HasExec() {
		return nil, fmt.Errorf("reading the vDSO's ELF: no executable segment")
	}
	t, err := cfi.FromELF(f)
	if err != nil {
		return nil, fmt.Errorf("compiling the vDSO's CFI: %w", err)
	}
	if len(t.Rows) == 0 {
		return nil, fmt.Errorf("compiling the vDSO's CFI: %w", cfi.ErrNoCFI)
	}
	rows := make([]cfi.Row, 0, len(t.Rows))
	for _, r := range t.Rows {
		if off, ok := addrs.CodeOffset(r.PC); ok {
			r.PC = off
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("compiling the vDSO's CFI: no row in its executable segment")
	}
	return rows, nil
}
