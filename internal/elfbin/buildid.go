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
// always covered by a PT_NOTE when linked externally). r reads the file;
// nil reads through f's segments and sections.
func ReadBuildIDs(f *elf.File, r io.ReaderAt) BuildIDs {
	var ids BuildIDs
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			parseNotes(noteBytes(r, p, p.Off, p.Filesz), p.Align, f.ByteOrder, &ids)
		}
	}
	if ids.GNU != "" && ids.Go != "" {
		return ids
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			parseNotes(noteBytes(r, s, s.Offset, s.FileSize), s.Addralign, f.ByteOrder, &ids)
		}
	}
	return ids
}

// noteBytes reads a note segment or section of size bytes at off of the
// file r, or through its own reader when r is nil.
func noteBytes(r, own io.ReaderAt, off, size uint64) []byte {
	if r == nil {
		return readBounded(own, 0, size)
	}
	return readBounded(r, off, size)
}

// GNUBuildID returns f's NT_GNU_BUILD_ID in lowercase hex, "" if none,
// read through f's own segments and sections.
func GNUBuildID(f *elf.File) string { return ReadBuildIDs(f, nil).GNU }

// readBounded reads up to maxNotesSize bytes at off; a short read yields
// what was read.
func readBounded(r io.ReaderAt, off, size uint64) []byte {
	size = min(size, maxNotesSize)
	buf := make([]byte, size)
	n, _ := r.ReadAt(buf, int64(off))
	return buf[:n]
}

// NoteBuildIDs returns the build ids in data, the content of a note
// segment or section of alignment align, in order's byte order: for a
// file's notes read as they stream in.
func NoteBuildIDs(data []byte, align uint64, order binary.ByteOrder) BuildIDs {
	var ids BuildIDs
	parseNotes(data, align, order, &ids)
	return ids
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
