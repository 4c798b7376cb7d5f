package uproberecv

import (
	"path/filepath"
	"regexp/syntax"
	"strings"
)

// literalDir returns the directory a file_match regex names literally: the
// regex begins with ^ (the start of the text) followed by a case-sensitive
// literal that starts with '/'; the directory is that literal up to its
// last '/'. It is read from the parsed regex, never guessed from its text:
// an unanchored regex, (?i), a group or an alternation before the last
// literal '/' name none.
func literalDir(expr string) (string, bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return "", false
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 || re.Sub[0].Op != syntax.OpBeginText {
		return "", false
	}
	var lit []rune
	for _, sub := range re.Sub[1:] {
		if sub.Op != syntax.OpLiteral || sub.Flags&syntax.FoldCase != 0 {
			break
		}
		lit = append(lit, sub.Rune...)
	}
	prefix := string(lit)
	i := strings.LastIndexByte(prefix, '/')
	if i < 0 || !strings.HasPrefix(prefix, "/") {
		return "", false
	}
	dir := prefix[:i]
	if dir == "" {
		dir = "/"
	}
	// Mapped paths are clean: a literal with "//", "." or ".." matches
	// none of them in that directory.
	if filepath.Clean(dir) != dir {
		return "", false
	}
	return dir, true
}
