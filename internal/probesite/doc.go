// Package probesite turns a probe's declared functions into uprobe sites in
// one ELF binary: it finds the function by name in .symtab, .dynsym
// (versioned names such as getaddrinfo@@GLIBC_2.2.5 included), demangled C++
// names, or Go's .gopclntab (which stripped Go binaries keep), converts
// virtual addresses into the file offsets uprobes take, and decodes the
// function's machine code (x86-64 with x86asm, arm64 with arm64asm) to
// place entry and return probes.
package probesite
