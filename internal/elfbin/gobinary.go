package elfbin

import "debug/elf"

// PclntabSection returns the section holding the Go pc/line table, nil
// when there is none: .gopclntab, or .data.rel.ro.gopclntab in a PIE
// binary linked externally.
func PclntabSection(f *elf.File) *elf.Section {
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return s
		}
	}
	return nil
}

// IsGo reports whether the Go toolchain built f, whose notes gave ids:
// its Go build id, its pc/line table or its build information, any one
// of which survives the usual stripping (-ldflags='-s -w', strip, or a
// file with no section headers).
func IsGo(f *elf.File, ids BuildIDs) bool {
	return ids.Go != "" || PclntabSection(f) != nil || f.Section(".go.buildinfo") != nil
}
