package symbolize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// notInMangled are words of demangled C++ (and Rust) names that need not
// appear as <length><identifier> in the mangled name: keywords, built-in
// types, the std:: abbreviations (St, Sa, Ss, ...) and the demangler's own
// words for unnamed entities.
var notInMangled = map[string]bool{
	"const": true, "volatile": true, "restrict": true, "unsigned": true, "signed": true,
	"int": true, "long": true, "short": true, "char": true, "bool": true, "void": true,
	"float": true, "double": true, "wchar_t": true, "char8_t": true, "char16_t": true,
	"char32_t": true, "auto": true, "decltype": true, "nullptr": true, "true": true,
	"false": true, "nullptr_t": true, "operator": true, "new": true, "delete": true, "this": true,
	"sizeof": true, "alignof": true, "noexcept": true, "throw": true, "typename": true,
	"struct": true, "class": true, "enum": true, "union": true, "std": true,
	"allocator": true, "basic_string": true, "char_traits": true, "basic_istream": true,
	"basic_ostream": true, "basic_iostream": true, "string": true, "istream": true,
	"ostream": true, "iostream": true, "anonymous": true, "namespace": true,
	"lambda": true, "default": true, "arg": true, "unnamed": true, "type": true, "abi": true, "clone": true,
	"vtable": true, "for": true, "typeinfo": true, "name": true, "guard": true,
	"variable": true, "construction": true, "thunk": true, "covariant": true,
	"return": true, "virtual": true, "non": true, "to": true, "in": true, "transaction": true,
	"cold": true, "constprop": true, "isra": true, "part": true,
}

// mangledNeedles returns the <length><identifier> strings every mangled
// name demangling to want contains: an identifier's first occurrence in an
// Itanium (or Rust v0) mangled name is spelled out, later ones may be
// substitutions. Words that can be encoded otherwise are left out, and so
// are identifiers starting with '_' (Rust v0 spells those "<len>_" + id).
// The longest comes first: it rules out most symbols.
func mangledNeedles(want string) []string {
	if i := strings.Index(want, " [clone"); i >= 0 {
		want = want[:i]
	}
	seen := map[string]bool{}
	var needles []string
	for i := 0; i < len(want); {
		c := want[i]
		if !identStart(c) {
			i++
			continue
		}
		j := i + 1
		for j < len(want) && (identStart(want[j]) || (want[j] >= '0' && want[j] <= '9')) {
			j++
		}
		word := want[i:j]
		// A word glued to a digit before it (a template argument 12ul, or
		// a "#1" ordinal) is not an identifier.
		// A quoted word is the demangler's name for an unnamed entity
		// ('lambda0', 'unnamed1').
		// A word after a dot names a clone (".localalias", ".cold").
		glued := i > 0 && ((want[i-1] >= '0' && want[i-1] <= '9') || want[i-1] == '\'' || want[i-1] == '.')
		i = j
		if glued || word[0] == '_' || notInMangled[word] || seen[word] {
			continue
		}
		seen[word] = true
		needles = append(needles, strconv.Itoa(len(word))+word)
	}
	for a := 1; a < len(needles); a++ {
		for b := a; b > 0 && len(needles[b]) > len(needles[b-1]); b-- {
			needles[b], needles[b-1] = needles[b-1], needles[b]
		}
	}
	return needles
}

func identStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// demangledMatches returns the symbols of syms whose mangled names
// demangle to want (see demangledMatch). Only names containing every
// needle of want are demangled: a table scan of the mangled names, instead
// of demangling all of them (seconds for a large C++ binary such as node).
func demangledMatches(syms []namedSymbol, want string) []namedSymbol {
	needles := mangledNeedles(want)
	var matched []namedSymbol
	for _, s := range syms {
		if !strings.HasPrefix(s.name, "_Z") && !strings.HasPrefix(s.name, "_R") {
			continue
		}
		ok := true
		for _, n := range needles {
			if !strings.Contains(s.name, n) {
				ok = false
				break
			}
		}
		if ok && demangledMatch(s.name, want) {
			matched = append(matched, s)
		}
	}
	return matched
}

// maxListedCandidates bounds the candidates an ambiguity error lists.
const maxListedCandidates = 20

// ambiguityError says that name matches functions at several addresses,
// lists them (mangled, demangled, address), and how to name one.
func ambiguityError(name string, cands []namedSymbol) error {
	var b strings.Builder
	fmt.Fprintf(&b, "looking up %s: several functions of that name at different addresses; name one by its mangled name or its full demangled signature:", name)
	seen := map[string]bool{}
	names := map[string]bool{}
	for _, s := range cands {
		names[s.name] = true
	}
	if len(names) == 1 {
		// Local symbols of one name, from different source files: neither
		// spelling tells them apart.
		fmt.Fprintf(&b, " (all are %s, local functions of different source files that no name tells apart: probe a function that calls the one you want)", cands[0].name)
	}
	listed := 0
	for _, s := range cands {
		key := s.name + "@" + strconv.FormatUint(s.start, 16)
		if seen[key] {
			continue
		}
		seen[key] = true
		if listed == maxListedCandidates {
			fmt.Fprintf(&b, " (and more)")
			break
		}
		listed++
		full := s.name
		if d, err := demangle.ToString(s.name); err == nil {
			full = d
		}
		fmt.Fprintf(&b, " [%s = %s at %#x]", s.name, full, s.start)
	}
	return fmt.Errorf("%s", b.String())
}
