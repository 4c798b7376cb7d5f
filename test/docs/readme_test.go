package docs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// readme returns README.md's lines.
func readme(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// codeBlock is one fenced block of README.md.
type codeBlock struct {
	line int // 1-based line of its opening fence
	text string
}

// fencedBlocks returns README.md's fenced blocks of language lang, indented
// ones (inside list items) included.
func fencedBlocks(lines []string, lang string) []codeBlock {
	var blocks []codeBlock
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if trimmed != "```"+lang {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		blocks = append(blocks, codeBlock{line: i + 1, text: strings.Join(body, "\n") + "\n"})
		i = j
	}
	return blocks
}

// section returns the lines after the heading that starts with title up to
// the next heading of the same or a higher level.
func section(t testing.TB, lines []string, title string) []string {
	t.Helper()
	for i, l := range lines {
		if !strings.HasPrefix(l, "#") || !strings.HasPrefix(strings.TrimLeft(l, "# "), title) {
			continue
		}
		level := len(l) - len(strings.TrimLeft(l, "#"))
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if h := lines[j]; strings.HasPrefix(h, "#") && len(h)-len(strings.TrimLeft(h, "#")) <= level {
				end = j
				break
			}
		}
		return lines[i+1 : end]
	}
	t.Fatalf("README.md has no heading %q", title)
	return nil
}

// tableRows returns the cells of the rows of the first table in lines whose
// header's first cell is header, without the header and separator rows.
func tableRows(t testing.TB, lines []string, header string) [][]string {
	t.Helper()
	for i, l := range lines {
		cells := splitRow(l)
		if len(cells) == 0 || cells[0] != header {
			continue
		}
		var rows [][]string
		for _, r := range lines[i+2:] {
			if !strings.HasPrefix(r, "|") {
				break
			}
			rows = append(rows, splitRow(r))
		}
		return rows
	}
	t.Fatalf("no table with a %q column", header)
	return nil
}

// splitRow splits a Markdown table row into its trimmed cells; a '|'
// inside a code span stays in its cell.
func splitRow(l string) []string {
	l = strings.TrimSpace(l)
	if !strings.HasPrefix(l, "|") {
		return nil
	}
	var cells []string
	var cur strings.Builder
	inCode := false
	for _, r := range l[1:] {
		switch {
		case r == '`':
			inCode = !inCode
			cur.WriteRune(r)
		case r == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return cells
}

// codeSpans returns the contents of the `code spans` in s.
func codeSpans(s string) []string {
	var spans []string
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			return spans
		}
		j := strings.IndexByte(s[i+1:], '`')
		if j < 0 {
			return spans
		}
		spans = append(spans, s[i+1:i+1+j])
		s = s[i+1+j+1:]
	}
}
