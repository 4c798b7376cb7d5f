package ebpfprofreceiver

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/process"
)

// exeRSS sums the Rss of the read-only mappings of the test binary, in kB.
func exeRSS(t *testing.T) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kb int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fl := strings.Fields(line); len(fl) >= 5 && strings.Contains(fl[0], "-") && !strings.HasSuffix(fl[0], ":") {
			in = isImageLine(line, uint64(st.Dev), uint64(st.Ino))
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			kb += n
		}
	}
	return kb
}

// TestPageOutImage pages out the test binary's code and read-only data:
// their resident pages drop, and the process runs on.
func TestPageOutImage(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := exeRSS(t)
	if before < 1024 {
		t.Fatalf("the test binary's read-only mappings hold %d kB: nothing to page out", before)
	}
	n, err := pageOutImage()
	if err != nil {
		t.Fatal(err)
	}
	after := exeRSS(t)
	t.Logf("%s: %d bytes of mappings advised; read-only RSS %d kB before, %d kB after", exe, n, before, after)
	if n == 0 {
		t.Fatal("no mapping of the executable found")
	}
	if after > before/2 {
		t.Errorf("read-only RSS of the executable %d kB after paging out, was %d kB: want at most half", after, before)
	}
}

func TestImageMapping(t *testing.T) {
	dev := unix.Mkdev(0xfe, 0x01)
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"00400000-0155d000 r-xp 00000000 fe:01 1234 /bin/bpfcol", true},
		{"0155d000-0291d000 r--p 0115d000 fe:01 1234 /bin/bpfcol", true},
		{"0291d000-02a33000 rw-p 0251d000 fe:01 1234 /bin/bpfcol", false},  // writable data
		{"00400000-0155d000 r-xp 00000000 fe:01 4321 /bin/other", false},   // another file
		{"00400000-0155d000 r-xp 00000000 fe:02 1234 /bin/bpfcol", false},  // another device
		{"7fca4fec6000-7fca50146000 rw-s 00000000 00:0f 1234 anon", false}, // shared
		{"00400000-00300000 r-xp 00000000 fe:01 1234 /bin/bpfcol", false},  // empty range
		{"garbage", false},
	} {
		if ok := isImageLine(c.line, dev, 1234); ok != c.ok {
			t.Errorf("%q: ok %v, want ok %v", c.line, ok, c.ok)
		}
	}
}

// isImageLine parses one maps line and asks imageMapping about it; a line
// that does not parse is not the image.
func isImageLine(line string, dev, ino uint64) bool {
	maps, err := process.ParseMappings(strings.NewReader(line))
	return err == nil && len(maps) == 1 && imageMapping(&maps[0], dev, ino)
}
