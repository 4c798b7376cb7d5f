package symbolize

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// demangleName turns C++ (Itanium) and Rust symbol names into source form,
// with parameter types, as llvm-symbolizer and addr2line -C print them.
// Anything else, or a name that fails to demangle, comes back unchanged.
func demangleName(name string) string {
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

// sourceAndSystemName returns a symbol's name in source form and, when that
// differs, its raw name (pprofile's system_name).
func sourceAndSystemName(raw string) (name, system string) {
	name = demangleName(raw)
	if name == raw {
		return raw, ""
	}
	return name, raw
}
