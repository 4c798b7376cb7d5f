package layering

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// procOwner is the one package that builds per-pid /proc paths: the others
// ask it (process.ReadMappings, process.PathInRoot, process.ThreadIDs...).
const procOwner = module + "/internal/process/"

// quote opens or closes a Go string literal, interpreted or raw.
const quote = "[\"`]"

// perPIDProcPath matches a line of Go code that builds a /proc path for a
// pid:
//   - "/proc/" or "/proc" joined by + to what follows: "/proc/" + pid;
//   - a format verb right after "/proc/": Sprintf("/proc/%d/maps", pid);
//   - Join, Sprint or Sprintln called with "/proc" or "/proc/" first:
//     filepath.Join("/proc", pid, "cwd");
//   - a literal pid: "/proc/1/root".
//
// Fixed files are no per-pid paths and do not match: /proc/self/...,
// /proc/thread-self/..., /proc/sys/..., /proc/kallsyms, nor "/proc" alone
// (listing the processes). The check reads one line at a time: a path
// built from a name holding "/proc" escapes it.
var perPIDProcPath = regexp.MustCompile(strings.Join([]string{
	quote + `/proc/?` + quote + `\s*\+`,
	quote + `/proc/%`,
	`\b(?:Join|Sprint|Sprintln)\(\s*` + quote + `/proc/?` + quote + `\s*,`,
	quote + `/proc/[0-9]+(?:/|` + quote + `)`,
}, "|"))

// perPIDProcPathLines returns the numbers of the lines of src that build a
// per-pid /proc path. Comment lines build nothing and are skipped.
func perPIDProcPathLines(src []byte) []int {
	var lines []int
	for i, line := range bytes.Split(src, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("//")) {
			continue
		}
		if perPIDProcPath.Match(line) {
			lines = append(lines, i+1)
		}
	}
	return lines
}

// sourceFiles lists the non-test Go files of every package of the module,
// by package, those of every platform included (a darwin stub builds
// paths as much as linux code does). Tests are left out: they read /proc
// of the workloads they start to check what bpfcol saw, and are no part
// of bpfcol.
func sourceFiles(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}{{"\t"}}{{.Dir}}{{range .GoFiles}}{{"\t"}}{{.}}{{end}}{{range .CgoFiles}}{{"\t"}}{{.}}{{end}}{{range .IgnoredGoFiles}}{{"\t"}}{{.}}{{end}}`,
		module+"/...").Output()
	if err != nil {
		t.Fatalf("listing packages: %v", err)
	}
	files := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "\t")
		if len(fields) < 2 {
			continue
		}
		pkg, dir := fields[0], fields[1]
		files[pkg] = nil
		for _, name := range fields[2:] {
			if !strings.HasSuffix(name, "_test.go") {
				files[pkg] = append(files[pkg], filepath.Join(dir, name))
			}
		}
	}
	return files
}

// TestPerPIDProcPathsOnlyInProcess checks that no package but
// internal/process builds a per-pid /proc path.
func TestPerPIDProcPathsOnlyInProcess(t *testing.T) {
	checkLinesOutside(t, procOwner, perPIDProcPathLines, "builds a per-pid /proc path: ask internal/process")
}

// checkLinesOutside fails for each line that lines finds in a non-test Go
// file of a package other than owner (and those under it), saying what it
// does; and when owner is gone, or too few files were read to mean
// anything.
func checkLinesOutside(t *testing.T, owner string, lines func([]byte) []int, does string) {
	t.Helper()
	scanned, ownerSeen := 0, false
	for pkg, files := range sourceFiles(t) {
		if under(pkg, []string{owner}) {
			ownerSeen = true
			continue
		}
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading %s: %v", file, err)
			}
			scanned++
			for _, n := range lines(src) {
				t.Errorf("%s:%d %s", file, n, does)
			}
		}
	}
	if !ownerSeen {
		t.Errorf("no package %s: the exemption is stale", strings.TrimSuffix(owner, "/"))
	}
	if scanned < 100 {
		t.Errorf("scanned only %d files: not the module root?", scanned)
	}
}

// TestProcPathCheckCatchesALeak proves the check can fail: made-up lines
// that build a per-pid /proc path are reported, and those naming fixed
// /proc files are not.
func TestProcPathCheckCatchesALeak(t *testing.T) {
	for _, line := range []string{
		`f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")`,
		`proc := "/proc/"+strconv.Itoa(pid)`,
		`p := "/proc" + "/" + strconv.Itoa(pid)`,
		"p := `/proc/` + pid",
		`b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))`,
		`tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%v/task/*", pid))`,
		`cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))`,
		`p := path.Join( "/proc/", pid)`,
		`p := fmt.Sprint("/proc/", pid, "/root")`,
		`exe, err := os.Readlink("/proc/1/exe")`,
	} {
		src := []byte("package leak\n\nfunc f() {\n\t" + line + "\n}\n")
		if got := perPIDProcPathLines(src); len(got) != 1 || got[0] != 4 {
			t.Errorf("%s: reported at lines %v, want 4", line, got)
		}
	}
	for _, line := range []string{
		`f, err := os.Open("/proc/self/maps")`,
		`return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))`,
		`p := "/proc/thread-self/comm"`,
		`entries, err := os.ReadDir("/proc")`,
		`const pidMaxFile = "/proc/sys/kernel/pid_max"`,
		`open = func() (io.ReadCloser, error) { return os.Open("/proc/kallsyms") }`,
		"var procRootPath = regexp.MustCompile(`^(/proc/[0-9]+/root)/(.+)$`)",
		`for _, d := range []string{"/proc", "/sys", "/dev"} {`,
		`// reads "/proc/" + pid + "/maps", as process.ReadMappings does`,
	} {
		src := []byte("package fine\n\nfunc f() {\n\t" + line + "\n}\n")
		if got := perPIDProcPathLines(src); len(got) != 0 {
			t.Errorf("%s: reported at lines %v, builds no per-pid path", line, got)
		}
	}
}
