package testworkload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// Compiler is the tool a workload is built with.
type Compiler string

// The compilers of workloads.
const (
	GCC   Compiler = "gcc"
	GXX   Compiler = "g++"
	Rustc Compiler = "rustc"
	Go    Compiler = "go"
	// MuslGCC builds C against musl instead of glibc.
	MuslGCC Compiler = "musl-gcc"
)

// Workload is one build of a workload: its compiler, its source under src/
// (a file, or for Go a directory) and the compiler's flags.
type Workload struct {
	Compiler Compiler
	Name     string
	Flags    []string
}

// String is the build as test/vmtest's workloads.txt spells it: a flag
// holding a blank in single quotes.
func (w Workload) String() string {
	words := []string{string(w.Compiler), w.Name}
	for _, f := range w.Flags {
		if strings.ContainsAny(f, " \t") {
			f = "'" + f + "'"
		}
		words = append(words, f)
	}
	return strings.Join(words, " ")
}

// Key names the build uniquely, for the prebuilt directory.
func (w Workload) Key() string {
	h := sha256.New()
	for _, s := range append([]string{string(w.Compiler), w.Name}, w.Flags...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// BinaryName is the file name of the built program: the source's name
// without its extension, so that the process's name is the same wherever
// it was built.
func (w Workload) BinaryName() string {
	return strings.TrimSuffix(w.Name, path.Ext(w.Name))
}

// Toolchain names the compilers that build workloads for one machine.
type Toolchain struct {
	CC, CXX, MuslCC, Rustc string
	// GOARCH is the Go target; empty for the host's.
	GOARCH string
}

// HostToolchain builds for the machine the tests run on.
var HostToolchain = Toolchain{CC: "gcc", CXX: "g++", MuslCC: "musl-gcc", Rustc: "rustc"}

// ARM64Toolchain cross-builds for arm64 (scripts/install-deps.sh installs
// its compilers); it builds no Rust, and says so by the command's name.
var ARM64Toolchain = Toolchain{CC: "aarch64-linux-gnu-gcc", CXX: "aarch64-linux-gnu-g++", Rustc: "rustc-aarch64-not-supported", GOARCH: "arm64"}

func (tc Toolchain) command(c Compiler) string {
	switch c {
	case GCC:
		return tc.CC
	case GXX:
		return tc.CXX
	case MuslGCC:
		return tc.MuslCC
	case Rustc:
		return tc.Rustc
	}
	return string(c)
}

// Compile builds w with tc into dir and returns the binary's path.
func Compile(w Workload, tc Toolchain, dir string) (string, error) {
	if w.Compiler == Go {
		return compileGo(w, tc, dir)
	}
	src, err := sources.ReadFile(path.Join("src", w.Name))
	if err != nil {
		return "", fmt.Errorf("reading workload source %q: %w", w.Name, err)
	}
	srcPath := filepath.Join(dir, w.Name)
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return "", fmt.Errorf("writing workload source: %w", err)
	}
	bin := filepath.Join(dir, w.BinaryName())
	args := append(append([]string{}, w.Flags...), "-o", bin, srcPath)
	return bin, runTool(dir, nil, tc.command(w.Compiler), args...)
}

func compileGo(w Workload, tc Toolchain, dir string) (string, error) {
	sub, err := fs.Sub(sources, path.Join("src", w.Name))
	if err != nil {
		return "", fmt.Errorf("opening workload %q: %w", w.Name, err)
	}
	srcDir := filepath.Join(dir, "src")
	if err := os.CopyFS(srcDir, sub); err != nil {
		return "", fmt.Errorf("copying workload %q: %w", w.Name, err)
	}
	if _, err := os.Stat(filepath.Join(srcDir, "main.go")); err != nil {
		return "", fmt.Errorf("workload %q has no main.go: %w", w.Name, err)
	}
	goMod := "module " + w.Name + "\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(srcDir, "go.mod"), []byte(goMod), 0o644); err != nil {
		return "", fmt.Errorf("writing go.mod: %w", err)
	}
	bin := filepath.Join(dir, w.BinaryName())
	args := append(append([]string{"build"}, w.Flags...), "-o", bin, ".")
	// The workload is its own module; keep the caller's workspace and
	// flags (e.g. -mod=vendor) out of it.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if tc.GOARCH != "" {
		env = append(env, "GOOS=linux", "GOARCH="+tc.GOARCH, "CGO_ENABLED=0")
	}
	return bin, runTool(srcDir, env, "go", args...)
}

func runTool(dir string, env []string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func run(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	if err := runTool(dir, env, name, args...); err != nil {
		t.Fatal(err)
	}
}

func lookTool(t testing.TB, name string) string {
	t.Helper()
	return testenv.LookPath(t, name)
}
