// Package symbolize turns addresses inside ELF binaries into function names
// and source positions.
//
// This is the first layer: ELF symbol tables (.symtab, falling back to
// .dynsym), Go's .gopclntab (which survives -ldflags='-s -w'), build ids,
// the mapping from file offsets in /proc/PID/maps to ELF virtual addresses,
// a bounded cache of opened binaries keyed by device and inode, and the
// kernel's /proc/kallsyms. DWARF, demangling and debuginfod come later.
package symbolize

// Frame is one source-level frame.
type Frame struct {
	// Function is the raw symbol name, or the Go function name.
	Function string
	// File is the source file, empty when only a symbol table was available.
	File string
	// Line is the source line, 0 if unknown.
	Line int64
}
