package layering

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// elfOwner is the one package that reads ELF binaries the risky ways:
// mapping a file (with the fault guard its reads need), the build-id
// notes, and compressed sections.
const elfOwner = module + "/internal/elfbin/"

// elfAccess matches a line of Go code that does one of those outside
// elfOwner:
//   - turns faults into panics (the guard of mapped reads);
//   - maps a file: an mmap whose descriptor is neither -1 (anonymous
//     memory) nor a BPF map's (.FD());
//   - reads a build-id note: the GNU note's owner name;
//   - inflates a section: a zlib or zstd reader.
var elfAccess = regexp.MustCompile(strings.Join([]string{
	`\bSetPanicOnFault\(`,
	`\bMmap\(`,
	`"GNU(?:\\x00)?"`,
	`\b(?:zlib|zstd|flate)\.NewReader\(`,
}, "|"))

// elfAccessLines returns the numbers of the lines of src that read an ELF
// binary in one of elfOwner's ways. Comment lines are skipped.
func elfAccessLines(src []byte) []int {
	var lines []int
	for i, line := range bytes.Split(src, []byte("\n")) {
		trimmed := bytes.TrimSpace(line)
		if bytes.HasPrefix(trimmed, []byte("//")) {
			continue
		}
		if elfAccess.Match(trimmed) && !anonOrMapMmap(trimmed) {
			lines = append(lines, i+1)
		}
	}
	return lines
}

// mmapFD matches an mmap call, its descriptor the submatch.
var mmapFD = regexp.MustCompile(`\bMmap\(\s*([^,]*),`)

// anonOrMapMmap reports whether line maps anonymous memory (descriptor
// -1) or a BPF map (a descriptor from .FD()), which are no files.
func anonOrMapMmap(line []byte) bool {
	m := mmapFD.FindSubmatch(line)
	if m == nil {
		return false
	}
	fd := bytes.TrimSpace(m[1])
	return bytes.Equal(fd, []byte("-1")) || bytes.HasSuffix(fd, []byte(".FD()"))
}

// TestELFAccessOnlyInElfbin checks that no package but internal/elfbin
// maps a file, guards faults, parses build-id notes or inflates sections.
func TestELFAccessOnlyInElfbin(t *testing.T) {
	checkLinesOutside(t, elfOwner, elfAccessLines, "reads an ELF binary elfbin's way: ask internal/elfbin")
}

// TestELFAccessCheckCatchesALeak proves the check can fail: made-up lines
// that read an ELF binary elfbin's ways are reported, and maps of
// anonymous memory or of a BPF map are not.
func TestELFAccessCheckCatchesALeak(t *testing.T) {
	for _, line := range []string{
		`old := debug.SetPanicOnFault(true)`,
		`data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)`,
		`m, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)`,
		`if typ == 3 && string(name[:namesz]) == "GNU\x00" && descsz > 0 {`,
		`case string(name) == "GNU":`,
		`zr, err := zlib.NewReader(bytes.NewReader(body))`,
		`d, err := zstd.NewReader(r)`,
	} {
		src := []byte("package leak\n\nfunc f() {\n\t" + line + "\n}\n")
		if got := elfAccessLines(src); len(got) != 1 || got[0] != 4 {
			t.Errorf("%s: reported at lines %v, want 4", line, got)
		}
	}
	for _, line := range []string{
		`return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)`,
		`mem, err := unix.Mmap(s.objs.UnwindRows.FD(), off, int(end-off), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)`,
		`// data, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_PRIVATE)`,
		`name := "GNU C17"`,
	} {
		src := []byte("package fine\n\nfunc f() {\n\t" + line + "\n}\n")
		if got := elfAccessLines(src); len(got) != 0 {
			t.Errorf("%s: reported at lines %v, want none", line, got)
		}
	}
}
