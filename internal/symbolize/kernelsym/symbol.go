package kernelsym

import (
	"bytes"
	"strconv"
)

// Symbol is the kernel's answer for one address.
type Symbol struct {
	// Name is the symbol name; for a JIT-compiled BPF program the kernel's
	// "bpf_prog_<tag>_<name>".
	Name string
	// Offset is the address minus the symbol's start. For a return address
	// the symbol is the one holding address-1, as the kernel's %pB does, so
	// Offset may equal Size.
	Offset uint64
	// Size is the distance from the symbol's start to the next symbol; 0
	// when unknown (on the kallsyms path, for the highest BPF program).
	Size uint64
	// Module is the kernel module holding the symbol, "" for the core
	// kernel and for BPF programs.
	Module string
	// IsBPFProg marks a JIT-compiled BPF program.
	IsBPFProg bool
	// Truncated tells that the kernel's text did not fit the formatter's
	// slot: Name is a prefix and Offset, Size and Module are unknown.
	Truncated bool
	// OK is false when the kernel knows no symbol for the address.
	OK bool
}

// parseKernelText parses what %pS and %pB print: "name+0xoff/0xsize",
// optionally followed by " [module]", or "0x<hex>" for an address the
// kernel cannot name.
func parseKernelText(text []byte, truncated bool) Symbol {
	if truncated {
		name := text
		if i := bytes.IndexByte(name, '+'); i > 0 {
			name = name[:i]
		}
		return Symbol{Name: string(name), IsBPFProg: isBPFProgName(name), Truncated: true, OK: len(name) > 0}
	}
	var module []byte
	if n := len(text); n > 0 && text[n-1] == ']' {
		if i := bytes.LastIndex(text, []byte(" [")); i >= 0 {
			module = text[i+2 : n-1]
			text = text[:i]
		}
	}
	slash := bytes.LastIndexByte(text, '/')
	if slash < 0 {
		return Symbol{}
	}
	plus := bytes.LastIndexByte(text[:slash], '+')
	if plus <= 0 {
		return Symbol{}
	}
	off, ok1 := parseHex(text[plus+1 : slash])
	size, ok2 := parseHex(text[slash+1:])
	if !ok1 || !ok2 {
		return Symbol{}
	}
	name := text[:plus]
	return Symbol{
		Name:      string(name),
		Offset:    off,
		Size:      size,
		Module:    string(module),
		IsBPFProg: isBPFProgName(name),
		OK:        true,
	}
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) < 3 || b[0] != '0' || b[1] != 'x' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:]), 16, 64)
	return v, err == nil
}

// isBPFProgName tells the kernel's name of a JIT-compiled program,
// "bpf_prog_" + the 8-byte tag in hex, then "_<name>" if it has one, from
// core functions such as bpf_prog_run.
func isBPFProgName(name []byte) bool {
	const prefix, tagLen = "bpf_prog_", 16
	if !bytes.HasPrefix(name, []byte(prefix)) || len(name) < len(prefix)+tagLen {
		return false
	}
	for _, c := range name[len(prefix) : len(prefix)+tagLen] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	rest := name[len(prefix)+tagLen:]
	return len(rest) == 0 || rest[0] == '_'
}
