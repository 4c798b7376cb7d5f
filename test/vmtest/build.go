package main

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// guestFiles is what one architecture's VMs need, built on the host.
type guestFiles struct {
	// testBins maps each suite's package to its test binary.
	testBins map[string]string
	// workloads is the directory of prebuilt workloads
	// (testworkload.PrebuiltEnv in the guest).
	workloads string
	// files maps guest paths to host files: shared libraries and their
	// loader, the packages' testdata.
	files map[string]string
}

// buildFor builds the test binaries and workloads for t's architecture
// into dir.
func buildFor(repo, dir string, t target, deb debian, suites []suite, workloads []testworkload.Workload) (*guestFiles, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	g := &guestFiles{testBins: map[string]string{}, workloads: filepath.Join(dir, "workloads"), files: map[string]string{}}
	for _, s := range suites {
		bin := filepath.Join(dir, "tests", strings.ReplaceAll(s.pkg, "/", "_")+".test")
		cmd := exec.Command("go", "test", "-c", "-o", bin, "./"+s.pkg)
		cmd.Dir = repo
		// Static test binaries: the guest has no C library for Go's.
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+t.goarch, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the tests of %s for %s: %w\n%s", s.pkg, t.goarch, err, out)
		}
		if _, err := os.Stat(bin); err != nil {
			// go test -c writes nothing for a package without tests
			// for this architecture: its tests fail in the guest.
			fmt.Fprintf(os.Stderr, "vmtest: %s: %s has no tests for this architecture, they will fail\n", t.goarch, s.pkg)
			continue
		}
		g.testBins[s.pkg] = bin
		if err := g.addTree(filepath.Join(repo, s.pkg, "testdata"), path.Join(repo, s.pkg, "testdata")); err != nil {
			return nil, err
		}
	}
	var elfs []string
	for _, w := range workloads {
		out := filepath.Dir(testworkload.PrebuiltPath(g.workloads, w))
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		bin, err := testworkload.Compile(w, t.toolchain, out)
		if err != nil {
			// Some do not build for every architecture (x86's
			// -fcf-protection=full): the tests that use them fail in
			// the guest, naming the build.
			fmt.Fprintf(os.Stderr, "vmtest: %s: workload %q does not build, the tests using it will fail: %v\n", t.goarch, w, err)
			_ = os.RemoveAll(out)
			continue
		}
		elfs = append(elfs, bin)
	}
	for _, tool := range t.hostTools {
		host, err := exec.LookPath(tool)
		if err != nil {
			return nil, fmt.Errorf("%s, which tests run in the guest, is not installed (scripts/install-deps.sh installs it): %w", tool, err)
		}
		if host, err = filepath.EvalSymlinks(host); err != nil {
			return nil, err
		}
		g.files[path.Join("/usr/bin", tool)] = host
		elfs = append(elfs, host)
	}
	for _, tool := range t.debTools {
		unpacked, _, err := deb.unpacked(tool.pkg, t.debArch)
		if err != nil {
			return nil, err
		}
		bin := filepath.Join(unpacked, tool.path)
		g.files[path.Join("/usr/bin", path.Base(tool.path))] = bin
		elfs = append(elfs, bin)
	}
	for _, pkg := range t.libPackages {
		unpacked, _, err := deb.unpacked(pkg, t.debArch)
		if err != nil {
			return nil, err
		}
		t.libDirs = append(t.libDirs, filepath.Join(unpacked, "lib", triplet(t)), filepath.Join(unpacked, "usr", "lib", triplet(t)))
	}
	if err := g.addLibraries(t, elfs); err != nil {
		return nil, err
	}
	return g, nil
}

// addTree adds the files under the host directory src at guest path dst,
// when src exists.
func (g *guestFiles) addTree(src, dst string) error {
	if _, err := os.Stat(src); os.IsNotExist(err) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		g.files[path.Join(dst, filepath.ToSlash(rel))] = p
		return nil
	})
}

// addLibraries adds the loader and the shared libraries bins need,
// recursively, from t's library directories, with their separate debug
// files where the host has them (libc6-dbg names libc's start code, the
// root of every C stack). The libraries go to /lib/<triplet>, which the
// loader searches by default; the loader goes to the path the binaries
// name.
func (g *guestFiles) addLibraries(t target, bins []string) error {
	seen := map[string]bool{}
	for len(bins) > 0 {
		bin := bins[0]
		bins = bins[1:]
		f, err := elf.Open(bin)
		if err != nil {
			return fmt.Errorf("reading %s: %w", bin, err)
		}
		needed, err := f.ImportedLibraries()
		interp := interpreter(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading the libraries %s needs: %w", bin, err)
		}
		if interp != "" && !seen[interp] {
			seen[interp] = true
			host, err := findLibrary(t, path.Base(interp))
			if err != nil {
				return fmt.Errorf("the loader of %s: %w", bin, err)
			}
			g.files[interp] = host
			g.addDebugFile(host)
		}
		for _, lib := range needed {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			host, err := findLibrary(t, lib)
			if err != nil {
				return fmt.Errorf("a library of %s: %w", bin, err)
			}
			g.files[path.Join("/lib", triplet(t), lib)] = host
			g.addDebugFile(host)
			bins = append(bins, host)
		}
	}
	return nil
}

// addDebugFile adds the debug file of the host ELF file bin, by its build
// id, at the same path in the guest, when the host has one.
func (g *guestFiles) addDebugFile(bin string) {
	f, err := elf.Open(bin)
	if err != nil {
		return
	}
	id := elfbin.GNUBuildID(f)
	f.Close()
	if len(id) < 4 {
		return
	}
	p := fmt.Sprintf("/usr/lib/debug/.build-id/%s/%s.debug", id[:2], id[2:])
	if real, err := filepath.EvalSymlinks(p); err == nil {
		g.files[p] = real
	}
}

func interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

func findLibrary(t target, name string) (string, error) {
	for _, dir := range t.libDirs {
		p := filepath.Join(dir, name)
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real, nil
		}
	}
	return "", fmt.Errorf("%s is in none of %v", name, t.libDirs)
}

func triplet(t target) string {
	if t.goarch == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}
