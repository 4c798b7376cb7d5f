package elfsym

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Demangle turns C++ (Itanium) and Rust symbol names into source form,
// with parameter types, as llvm-symbolizer and addr2line -C print them.
// Anything else, or a name that fails to demangle, comes back unchanged.
func Demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	// GCC appends clone suffixes (.cold, .constprop.0.isra.0) that are not
	// part of the mangling; keep them as one parenthesised suffix.
	base, suffix, cloned := strings.Cut(name, ".")
	if !strings.HasPrefix(name, "_Z") {
		base, cloned = name, false
	}
	d, err := demangle.ToString(base, demangle.LLVMStyle)
	if err != nil {
		return name
	}
	if cloned {
		return d + " (." + suffix + ")"
	}
	return d
}

// Names returns a symbol's name in source form and, when that
// differs, its raw name (pprofile's system_name). The source form has no
// symbol version: a symbol table spells versioned definitions
// "clock_nanosleep@@GLIBC_2.17", the function is clock_nanosleep.
func Names(raw string) (name, system string) {
	name = raw
	if i := strings.IndexByte(raw, '@'); i > 0 {
		name = raw[:i]
	}
	name = Demangle(name)
	if name == raw {
		return raw, ""
	}
	return name, raw
}
