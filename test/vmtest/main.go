// Command vmtest runs bpfcol's kernel-facing tests inside VMs booted on
// other kernels and architectures than the host's: Debian's 6.1 and 6.12
// cloud kernels on x86-64, and 6.1 on arm64, emulated by qemu (TCG). It
// builds the test binaries of tests.txt and the workloads of workloads.txt
// for each architecture, packs them with busybox into an initramfs, boots
// each target and prints one line per target:
//
//	vmtest: x86_64 6.1.192: 24 passed, 0 failed
//
// It exits non-zero when a test fails or skips, or a target does not boot
// or does not finish within its timeout. `make vmtest` runs every target.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	names := flag.String("targets", "all", "comma-separated targets to run, or all: "+targetNames())
	cache := flag.String("cache", ".cache/vmtest", "directory for the kernels, busybox and the builds")
	timeout := flag.Duration("timeout", 60*time.Minute, "watchdog: qemu is killed after this long per target")
	testTimeout := flag.Duration("test-timeout", 20*time.Minute, "the -test.timeout of each test binary in the guest")
	testList := flag.String("tests", "test/vmtest/tests.txt", "the list of tests to run (package, test names)")
	flag.Parse()
	selected, err := selectTargets(*names)
	if err == nil {
		err = run(selected, *cache, *testList, *timeout, *testTimeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(1)
	}
}

func targetNames() string {
	var n []string
	for _, t := range targets {
		n = append(n, t.name)
	}
	return strings.Join(n, ", ")
}

func selectTargets(list string) ([]target, error) {
	if list == "all" {
		return targets, nil
	}
	var sel []target
	for _, name := range strings.Split(list, ",") {
		i := slices.IndexFunc(targets, func(t target) bool { return t.name == name })
		if i < 0 {
			return nil, fmt.Errorf("no target %q (there are %s)", name, targetNames())
		}
		sel = append(sel, targets[i])
	}
	return sel, nil
}

// errFailed is returned when a target failed; its line said how.
var errFailed = errors.New("failed")

func run(selected []target, cache, testList string, timeout, testTimeout time.Duration) error {
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join(repo, cache)
	}
	here := filepath.Join(repo, "test", "vmtest")
	if !filepath.IsAbs(testList) {
		testList = filepath.Join(repo, testList)
	}
	suites, err := readSuites(testList)
	if err != nil {
		return err
	}
	workloads, err := readWorkloads(filepath.Join(here, "workloads.txt"))
	if err != nil {
		return err
	}
	deb := debian{cache: cache}
	built := map[string]*guestFiles{}
	failed := false
	for _, t := range selected {
		start := time.Now()
		suites := suitesFor(t, suites)
		k, err := deb.kernel(t)
		if err != nil {
			return err
		}
		busybox, err := deb.busybox(t.debArch)
		if err != nil {
			return err
		}
		g := built[t.goarch]
		if g == nil {
			if g, err = buildFor(repo, filepath.Join(cache, "build", t.goarch), t, deb, suites, workloads); err != nil {
				return err
			}
			built[t.goarch] = g
		}
		nonce := newNonce()
		initrd := filepath.Join(cache, "build", t.name+".cpio")
		if err := writeInitramfs(initrd, busybox, repo, runScript(repo, nonce, suites, testTimeout), g, suites); err != nil {
			return fmt.Errorf("packing the initramfs of %s: %w", t.name, err)
		}
		st, err := os.Stat(initrd)
		if err != nil {
			return err
		}
		prepared := time.Since(start)
		logPath := filepath.Join(cache, "logs", t.name+".log")
		if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
			return err
		}
		res := boot(t, k, initrd, nonce, suites, guestMemory(st.Size()), timeout, logPath)
		if !summarize(t, k, res, prepared, logPath) {
			failed = true
		}
	}
	if failed {
		return errFailed
	}
	return nil
}

// guestMemory leaves room for the initramfs twice (the archive and its
// unpacked files) and the tests.
func guestMemory(initrdBytes int64) int {
	return max(2048, 1024+2*int(initrdBytes>>20))
}

// summarize prints the target's line on stdout, and on stderr how long it
// took and what failed; it reports whether the target passed.
func summarize(t target, k kernel, res bootResult, prepared time.Duration, logPath string) bool {
	r := res.report
	passed, failed := r.counts()
	fmt.Printf("vmtest: %s %s: %d passed, %d failed\n", t.arch, k.version, passed, failed)
	detail := fmt.Sprintf("vmtest: %s %s (%s): built and packed in %s", t.arch, k.version, k.pkg, prepared.Round(time.Second))
	if r.booted {
		detail += fmt.Sprintf(", booted in %s, tests ran %s", res.bootTime.Round(time.Second), res.runTime.Round(time.Second))
	}
	fmt.Fprintln(os.Stderr, detail+"; console log "+logPath)
	for _, l := range r.benchLines {
		fmt.Fprintf(os.Stderr, "vmtest: %s %s: %s\n", t.arch, k.version, l)
	}
	for _, tr := range r.results {
		if tr.outcome != "PASS" {
			how := tr.outcome
			switch {
			case tr.kernelLacks != "":
				how = "skipped, neither passed nor failed: kernel lacks " + tr.kernelLacks
			case how == "":
				how = "did not run or end"
			}
			fmt.Fprintf(os.Stderr, "vmtest: %s %s: %s %s: %s\n", t.arch, k.version, tr.pkg, tr.name, how)
		}
	}
	for _, p := range r.problems {
		fmt.Fprintf(os.Stderr, "vmtest: %s %s: %s\n", t.arch, k.version, p)
	}
	switch {
	case !r.booted:
		fmt.Fprintf(os.Stderr, "vmtest: %s %s: the guest did not boot (%v)\n", t.arch, k.version, res.err)
	case !r.done:
		fmt.Fprintf(os.Stderr, "vmtest: %s %s: the guest did not finish (%v)\n", t.arch, k.version, res.err)
	}
	return r.ok()
}

func newNonce() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// repoRoot is the directory of go.mod, at or above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory: run from the repository")
		}
		dir = parent
	}
}
