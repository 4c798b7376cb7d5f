package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// The guest's layout: busybox's init runs /vmtest/run (its only inittab
// entry, so init also reaps the processes tests orphan), which runs each
// test binary from its package's directory, at the path the package has
// on the host, where its testdata is and where paths a test derives from
// its own source file lead.
const (
	guestBin       = "/vmtest/bin"
	guestWorkloads = "/vmtest/workloads"
	guestRun       = "/vmtest/run"
)

// marker prefixes the lines the guest writes for the host to find, with a
// per-run nonce no test output can contain by chance.
func marker(nonce string) string { return "vmtest." + nonce }

// runScript is the guest's test script: it mounts what the tests use, runs
// each suite and powers off.
func runScript(repo, nonce string, suites []suite, testTimeout time.Duration) string {
	m := marker(nonce)
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin HOME=/root TMPDIR=/tmp %s=1 %s=%s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# /tmp stays the initramfs's own (a tmpfs already): the repository's
# packages are packed at their host paths, which may lie under /tmp.
mkdir -p /tmp && chmod 1777 /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
# Kernel messages would break the test output's lines; they are printed
# after the tests instead.
dmesg -n 1
echo "%s boot $(uname -r) $(uname -m) $(nproc)"
`, testenv.RequireBPFEnv, testworkload.PrebuiltEnv, guestWorkloads, m)
	for _, s := range suites {
		if len(s.tests) > 0 {
			fmt.Fprintf(&b, "echo '%s start %s'\n", m, s.pkg)
			fmt.Fprintf(&b, "cd '%s' && '%s' -test.v=test2json -test.count=1 -test.timeout=%s -test.run '%s' 2>&1\n",
				path.Join(repo, s.pkg), path.Join(guestBin, testBinName(s)), testTimeout, s.runPattern())
			fmt.Fprintf(&b, "echo \"%s exit %s $?\"\n", m, s.pkg)
		}
		if len(s.benches) > 0 {
			fmt.Fprintf(&b, "echo '%s bench %s'\n", m, s.pkg)
			fmt.Fprintf(&b, "cd '%s' && '%s' -test.v=test2json -test.count=1 -test.timeout=%s -test.run '^$' -test.bench '%s' -test.benchtime 1x 2>&1\n",
				path.Join(repo, s.pkg), path.Join(guestBin, testBinName(s)), testTimeout, s.benchPattern())
			fmt.Fprintf(&b, "echo \"%s exit %s $?\"\n", m, s.pkg)
		}
	}
	fmt.Fprintf(&b, "echo '%s dmesg'\ndmesg\necho '%s done'\npoweroff -f\n", m, m)
	return b.String()
}

func testBinName(s suite) string { return strings.ReplaceAll(s.pkg, "/", "_") + ".test" }

// writeInitramfs packs busybox, the built files and the run script.
func writeInitramfs(out, busybox, repo, script string, g *guestFiles, suites []suite) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	a := newInitramfs(f)
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp", "/root", "/run"} {
		a.mkdirAll(d)
	}
	// The kernel opens the console for init before anything mounts /dev.
	a.charDevice("/dev/console", 5, 1)
	a.file("/bin/busybox", busybox, 0o755)
	a.symlink("/bin/sh", "busybox")
	// capsh runs its command with /bin/bash, an applet Debian's busybox
	// lacks: its shell stands in.
	a.bytes("/bin/bash", []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"), 0o755)
	a.symlink("/init", "bin/busybox")
	a.bytes("/etc/inittab", []byte("::sysinit:"+guestRun+"\n"), 0o644)
	a.bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	a.bytes("/etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	a.bytes("/etc/hosts", []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644)
	a.bytes(guestRun, []byte(script), 0o755)
	for _, s := range suites {
		a.mkdirAll(path.Join(repo, s.pkg))
		if bin, ok := g.testBins[s.pkg]; ok {
			a.file(path.Join(guestBin, testBinName(s)), bin, 0o755)
		}
	}
	err = filepath.WalkDir(g.workloads, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(g.workloads, p)
		a.file(path.Join(guestWorkloads, filepath.ToSlash(rel)), p, 0o755)
		return nil
	})
	if err != nil {
		return err
	}
	guestPaths := make([]string, 0, len(g.files))
	for p := range g.files {
		guestPaths = append(guestPaths, p)
	}
	sort.Strings(guestPaths)
	for _, p := range guestPaths {
		st, err := os.Stat(g.files[p])
		if err != nil {
			return err
		}
		a.file(p, g.files[p], st.Mode().Perm())
	}
	if err := a.close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
