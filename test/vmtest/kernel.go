package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// debian fetches Debian packages into the cache with apt-get download and
// unpacks them with dpkg-deb, once: nothing is installed on the host.
type debian struct {
	cache string
}

// kernel is an unpacked kernel package.
type kernel struct {
	pkg     string
	version string // upstream version, e.g. 6.1.192
	image   string // boot/vmlinuz-*
}

// kernel returns the kernel image t boots: the current dependency of its
// meta-package, fetched when not cached yet. Without apt (offline, or the
// architecture not added) the newest cached one of that series is used.
func (d debian) kernel(t target) (kernel, error) {
	pkg, resolveErr := d.depends(t.kernelPackage + ":" + t.debArch)
	if resolveErr != nil {
		if k, ok := d.cachedKernel(t); ok {
			return k, nil
		}
		return kernel{}, resolveErr
	}
	dir, version, err := d.unpacked(pkg, t.debArch)
	if err != nil {
		return kernel{}, err
	}
	return d.kernelIn(pkg, dir, version)
}

func (d debian) kernelIn(pkg, dir, version string) (kernel, error) {
	images, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return kernel{}, fmt.Errorf("package %s holds %d kernel images, want 1", pkg, len(images))
	}
	return kernel{pkg: pkg, version: upstreamVersion(version), image: images[0]}, nil
}

// cachedKernel finds the newest kernel of t's series already unpacked.
func (d debian) cachedKernel(t target) (kernel, bool) {
	series := strings.TrimPrefix(t.name, t.arch+"-")
	dirs, _ := filepath.Glob(filepath.Join(d.cache, "debs", "linux-image-"+series+".*_"+t.debArch))
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		version, err := os.ReadFile(filepath.Join(dirs[i], "VERSION"))
		if err != nil {
			continue
		}
		pkg := strings.TrimSuffix(filepath.Base(dirs[i]), "_"+t.debArch)
		if k, err := d.kernelIn(pkg, dirs[i], strings.TrimSpace(string(version))); err == nil {
			return k, true
		}
	}
	return kernel{}, false
}

// upstreamVersion drops Debian's revision: 6.12.117-1~deb12u1 is 6.12.117.
func upstreamVersion(v string) string {
	v, _, _ = strings.Cut(v, "-")
	return v
}

var dependsLine = regexp.MustCompile(`^\s*Depends: (linux-image-\S+)`)

// depends returns the kernel image package meta depends on.
func (d debian) depends(meta string) (string, error) {
	out, err := exec.Command("apt-cache", "depends", "--important", meta).Output()
	if err != nil {
		return "", fmt.Errorf("resolving %s with apt-cache (run scripts/install-deps.sh --vm): %w", meta, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := dependsLine.FindStringSubmatch(sc.Text()); m != nil {
			pkg, _, _ := strings.Cut(m[1], ":")
			return pkg, nil
		}
	}
	return "", fmt.Errorf("resolving %s: apt-cache names no kernel image it depends on:\n%s", meta, out)
}

// unpacked returns the directory pkg:arch is unpacked in, and its
// version, downloading and unpacking it the first time.
func (d debian) unpacked(pkg, arch string) (dir, version string, err error) {
	dir = filepath.Join(d.cache, "debs", pkg+"_"+arch)
	if v, err := os.ReadFile(filepath.Join(dir, "VERSION")); err == nil {
		return dir, strings.TrimSpace(string(v)), nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(filepath.Join(d.cache, "debs"), 0o755); err != nil {
		return "", "", err
	}
	dl, err := os.MkdirTemp(filepath.Join(d.cache, "debs"), "download-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dl)
	fmt.Fprintf(os.Stderr, "vmtest: downloading %s:%s\n", pkg, arch)
	// The sandbox user cannot write into a root-owned cache; nothing is
	// installed, the package is only unpacked.
	get := exec.Command("apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", pkg+":"+arch)
	get.Dir = dl
	if out, err := get.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("apt-get download %s:%s (for arm64, run scripts/install-deps.sh --vm, which adds the architecture): %w\n%s", pkg, arch, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return "", "", fmt.Errorf("apt-get download %s:%s left %d packages, want 1", pkg, arch, len(debs))
	}
	out, err := exec.Command("dpkg-deb", "-f", debs[0], "Version").Output()
	if err != nil {
		return "", "", fmt.Errorf("reading the version of %s: %w", debs[0], err)
	}
	version = strings.TrimSpace(string(out))
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("unpacking %s: %w\n%s", debs[0], err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "VERSION"), []byte(version+"\n"), 0o644); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", "", err
	}
	return dir, version, nil
}

// busybox returns the static busybox for arch, from Debian's
// busybox-static package.
func (d debian) busybox(arch string) (string, error) {
	dir, _, err := d.unpacked("busybox-static", arch)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "bin", "busybox"), nil
}
