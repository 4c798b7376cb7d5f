// Package symbolize turns addresses inside ELF binaries into function names
// and source positions.
//
// A Binary answers from the best source it has, each read by a package of
// its own: Go's .gopclntab, which survives -ldflags='-s -w' (gotable);
// DWARF 4 and 5, function, file:line and the inline chain (dwarfsym); the
// symbol table, .symtab falling back to .dynsym, C++ and Rust names
// demangled (elfsym). Their sections come in place from the mapped file,
// or decompressed to disk by the section spill (spill.go, prefix.go), as
// sections.Image gives them; the file itself (mapped, its build ids, its
// address mapper) is read through internal/elfbin. Parsed tables are held
// in Tables, bounded by bytes. Kernel addresses are kernelsym's.
//
// Symbolizer classifies each mapping (skip, process mode, file mode) and, in
// file mode, has the separate debug file found by GNU build-id or
// .gnu_debuglink (debugfiles: the system debug directory, configured
// directories, the bpfcol cache, then a background debuginfod fetch). Its
// files by job: symbolizer.go (config, stats, the lookup), classify.go,
// debugtables.go (the parsed debug files held, bounded by bytes). Every
// in-memory cache is an internal/lru or internal/negcache cache;
// CacheStats reports their size and evictions.
package symbolize
