// Package symbolize turns addresses inside ELF binaries into function names
// and source positions.
//
// Sources: ELF symbol tables (.symtab, falling back to .dynsym), DWARF 4
// and 5 (function, file:line and the inline chain; zlib, zstd and .zdebug
// sections), Go's .gopclntab (which survives -ldflags='-s -w'), demangled
// C++ and Rust names, a bounded cache of opened binaries keyed by device
// and inode. The file itself (mapped, its build ids, its address mapper,
// its compressed sections) is read through internal/elfbin. Kernel
// addresses are kernelsym's.
//
// Symbolizer classifies each mapping (skip, process mode, file mode) and, in
// file mode, finds the separate debug file by GNU build-id: the system
// debug directory, configured directories, the bpfcol cache, then a
// background debuginfod fetch. Its files by job: symbolizer.go (config,
// stats, the lookup), classify.go, debuglink.go (.gnu_debuglink), fetch.go
// (local candidates and debuginfod), debugtables.go (the parsed debug files
// held, bounded by bytes). Every in-memory cache is an internal/lru or
// internal/negcache cache; CacheStats reports their size and evictions.
package symbolize
