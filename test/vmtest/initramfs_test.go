package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestInitramfsReadByCpio writes an archive and lists and unpacks it with
// GNU cpio, which shares no code with the writer.
func TestInitramfsReadByCpio(t *testing.T) {
	cpio := testenv.LookPath(t, "cpio")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	// Sizes around the 4-byte padding.
	payload := bytes.Repeat([]byte("0123456789"), 1001)
	if err := os.WriteFile(src, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	a := newInitramfs(&buf)
	a.file("/vmtest/bin/a.test", src, 0o755)
	a.bytes("/etc/x", []byte("abc"), 0o644)
	a.bytes("/etc/yy", []byte("abcde"), 0o600)
	a.symlink("/bin/sh", "busybox")
	a.charDevice("/dev/console", 5, 1)
	a.mkdirAll("/deep/er/dir")
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	list := exec.Command(cpio, "-itv", "--quiet")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{
		"drwxr-xr-x .* vmtest\n", "-rwxr-xr-x .* 10010 .* vmtest/bin/a.test\n",
		"-rw-r--r-- .* 3 .* etc/x\n", "-rw------- .* 5 .* etc/yy\n",
		"lrwxrwxrwx .* bin/sh -> busybox\n", "crw------- .* 5, +1 .* dev/console\n",
		"drwxr-xr-x .* deep/er/dir\n",
	} {
		if !matches(want, string(out)) {
			t.Errorf("cpio lists no line like %q:\n%s", want, out)
		}
	}
	unpack := filepath.Join(dir, "root")
	if err := os.Mkdir(unpack, 0o755); err != nil {
		t.Fatal(err)
	}
	extract := exec.Command(cpio, "-id", "--quiet", "--no-absolute-filenames")
	extract.Dir = unpack
	extract.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := extract.CombinedOutput(); err != nil && !strings.Contains(string(out), "dev/console") {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(unpack, "vmtest/bin/a.test"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("unpacked file differs (%d bytes, want %d): %v", len(got), len(payload), err)
	}
	if got, err := os.ReadFile(filepath.Join(unpack, "etc/yy")); err != nil || string(got) != "abcde" {
		t.Errorf("etc/yy = %q, %v", got, err)
	}
}
