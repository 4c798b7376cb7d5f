// Package dwarfsym names addresses from DWARF 4 and 5 (function,
// file:line and the inline chain), one compile unit at a time: units are
// indexed by address (.debug_aranges, else their ranges), and only the
// unit an address falls in is parsed into a compact table. Compressed
// DWARF the binary's Spill decompresses to disk is read by prefix, as far
// as lookups need. Parsed tables live in the binary's Cache, bounded by
// bytes, and are parsed again after eviction.
package dwarfsym

import "debug/elf"

// Kind says which parsed table of a binary's DWARF an entry of its Cache
// holds.
type Kind uint8

const (
	// KindIndex: the index of compile units by address.
	KindIndex Kind = iota
	// KindSections: the DWARF sections, decompressed when stored
	// compressed.
	KindSections
	// KindUnit: the line table and function tree of one compile unit.
	KindUnit
	// KindFull: debug/dwarf's reader of the whole DWARF, for units that
	// refer to others (Go, LTO).
	KindFull
	// KindPrefixIndex: the index of compile units by address of DWARF
	// read by prefix, from .debug_aranges.
	KindPrefixIndex
	// KindPrefixUnit: one compile unit parsed through the prefix, by
	// index.
	KindPrefixUnit
)

// Cache holds one binary's parsed DWARF tables, bounded by bytes: a table
// evicted is parsed again from the mapped file when asked for.
type Cache interface {
	// Get returns the table of kind (and unit), calling parse on a miss,
	// which gives it with the heap it holds. The pages of drop (the mapped
	// file) leave the RSS after a parse.
	Get(kind Kind, unit int32, drop []byte, parse func() (any, int64)) any
	// Add stores a table parsed elsewhere, unless one is held.
	Add(kind Kind, v any, cost int64)
	// DropPrefix drops the tables read by prefix (KindPrefixIndex,
	// KindPrefixUnit), once the whole index answers instead.
	DropPrefix()
}

// Spill decompresses a binary's compressed sections to files mapped
// outside the heap.
type Spill interface {
	// Prefix returns s decompressed as far as reads ask, its whole room
	// reserved, or whole when it is kept whole already; ok is false when
	// s cannot be read so (not zlib, no room, raw not at hand).
	Prefix(f *elf.File, s *elf.Section, raw []byte) (p Prefix, whole []byte, ok bool)
	// DropPages takes the spilled pages read so far out of the RSS.
	DropPages()
}

// Prefix is a section decompressed to disk only as far as reads need.
type Prefix interface {
	// Data is the whole section's room; only its first Length bytes are
	// to be read.
	Data() []byte
	// Length is how much is decompressed so far.
	Length() int64
	// Size is the section's decompressed size.
	Size() int64
	// Ensure decompresses at least the first n bytes.
	Ensure(n int64) error
}
