package elfbin

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
)

// File is an ELF binary opened to be read: its headers, its content
// mapped read-only where it can be (read under GuardFaults), its build ids
// and the mapper between its file offsets and virtual addresses.
type File struct {
	OS    *os.File
	ELF   *elf.File
	Data  []byte // the mapped file; nil when it could not be mapped
	Addrs *AddressMapper
	IDs   BuildIDs
	IsGo  bool // built by the Go toolchain
}

// Open maps f and reads its ELF headers and notes. It takes f: f is closed
// on error, and by Close otherwise.
func Open(f *os.File) (*File, error) {
	data, err := Map(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	var ra io.ReaderAt = f
	if data != nil {
		ra = bytes.NewReader(data)
	}
	b := &File{OS: f, Data: data}
	// The headers are read from the mapping: a file truncated meanwhile
	// faults there.
	if gerr := Guard("reading the ELF headers of "+f.Name(), func() {
		if b.ELF, err = elf.NewFile(ra); err != nil {
			return
		}
		b.Addrs = NewAddressMapper(b.ELF.Progs)
		b.IDs = ReadBuildIDs(b.ELF, ra)
		b.IsGo = IsGo(b.ELF, b.IDs)
	}); gerr != nil || err != nil {
		b.Close()
		if gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("parsing ELF headers of %s: %w", f.Name(), err)
	}
	return b, nil
}

// Close unmaps and closes the file.
func (b *File) Close() error {
	return errors.Join(Unmap(b.Data), b.OS.Close())
}
