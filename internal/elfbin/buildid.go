// Package elfbin holds what bpfcol reads from an ELF binary's headers the
// same way everywhere: its build ids, and whether the Go toolchain built
// it. Files come from processes other users control: every read is
// bounded, and a malformed file gives nothing, never a panic.
package elfbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
)

const (
	noteTypeGNUBuildID = 3 // NT_GNU_BUILD_ID
	noteTypeGoBuildID  = 4 // ELF_NOTE_GOBUILDID_TAG in cmd/link
	// maxNotesSize bounds how much of a note segment or section is read.
	maxNotesSize = 64 << 10
)

// BuildIDs holds the build ids found in a binary's notes.
type BuildIDs struct {
	GNU string // lowercase hex
	Go  string
}

// ReadBuildIDs scans the PT_NOTE segments of f, falling back to SHT_NOTE
// sections when the segments do not carry both notes (Go's note is not
// always covered by a PT_NOTE when linked externally).
func ReadBuildIDs(f *elf.File, r io.ReaderAt) BuildIDs {
	var ids BuildIDs
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		parseNotes(readBounded(r, p.Off, p.Filesz), p.Align, f.ByteOrder, &ids)
	}
	if ids.GNU != "" && ids.Go != "" {
		return ids
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		parseNotes(readBounded(r, s.Offset, s.FileSize), s.Addralign, f.ByteOrder, &ids)
	}
	return ids
}

// readBounded reads up to maxNotesSize bytes at off; a short read yields
// what was read.
func readBounded(r io.ReaderAt, off, size uint64) []byte {
	size = min(size, maxNotesSize)
	buf := make([]byte, size)
	n, _ := r.ReadAt(buf, int64(off))
	return buf[:n]
}

// parseNotes walks ELF notes in data, filling in ids that are still empty.
// Descriptors are padded to the note alignment, which is 8 for some notes
// (e.g. .note.gnu.property) and 4 otherwise.
func parseNotes(data []byte, align uint64, order binary.ByteOrder, ids *BuildIDs) {
	descAlign := uint64(4)
	if align == 8 {
		descAlign = 8
	}
	for len(data) >= 12 {
		namesz := uint64(order.Uint32(data[0:]))
		descsz := uint64(order.Uint32(data[4:]))
		typ := order.Uint32(data[8:])
		data = data[12:]
		nameEnd := alignUp(namesz, 4)
		if nameEnd > uint64(len(data)) {
			return
		}
		name := bytes.TrimRight(data[:namesz], "\x00")
		rest := data[nameEnd:]
		if descsz > uint64(len(rest)) {
			return
		}
		desc := rest[:descsz]
		switch {
		case typ == noteTypeGNUBuildID && string(name) == "GNU" && ids.GNU == "":
			ids.GNU = hex.EncodeToString(desc)
		case typ == noteTypeGoBuildID && string(name) == "Go" && ids.Go == "":
			ids.Go = string(bytes.TrimRight(desc, "\x00"))
		}
		next := alignUp(descsz, descAlign)
		if next > uint64(len(rest)) {
			return
		}
		data = rest[next:]
	}
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }
