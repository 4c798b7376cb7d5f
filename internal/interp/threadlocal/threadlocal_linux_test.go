package threadlocal

import (
	"bufio"
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// libc is the C library the tests' programs run with.
const libc = "/lib/x86_64-linux-gnu/libc.so.6"

// TestTSDMatchesGlibc reads the TSD layout off this machine's libc, then
// follows it in a running program to each key's data, in two threads and
// in both of glibc's key blocks, and compares with what the program's own
// pthread_getspecific returned.
func TestTSDMatchesGlibc(t *testing.T) {
	testenv.RequireRoot(t)
	f, err := os.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := elfimage.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := TSD(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v", libc, layout)

	bin := testworkload.BuildC(t, "tsdkeys.c", "-O2", "-pthread")
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	mem, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	threads, keys, maxKey := 0, 0, uint64(0)
	for sc.Scan() && sc.Text() != "done" {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "thread" {
			t.Fatalf("unexpected line %q", sc.Text())
		}
		threads++
		tp, _ := strconv.ParseUint(fields[1], 16, 64)
		for _, kv := range fields[2:] {
			ks, vs, _ := strings.Cut(kv, "=")
			k, _ := strconv.ParseUint(ks, 10, 64)
			v, _ := strconv.ParseUint(vs, 16, 64)
			keys++
			maxKey = max(maxKey, k)
			if got := readMem(t, mem, keyData(t, mem, layout, tp, k)); got != v {
				t.Errorf("thread %#x key %d: the layout leads to %#x, pthread_getspecific returned %#x", tp, k, got, v)
			}
		}
	}
	t.Logf("%d threads, %d keys checked, up to key %d", threads, keys, maxKey)
	if threads != 2 || maxKey < 1<<layout.BlockShift {
		t.Fatalf("%d threads, keys up to %d: the second block was not reached", threads, maxKey)
	}
}

// readMem reads 8 bytes at addr of pid.
func readMem(t *testing.T, mem *os.File, addr uint64) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		t.Fatalf("reading %#x: %v", addr, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// keyData follows layout from thread pointer tp to key k's data address.
func keyData(t *testing.T, mem *os.File, l profiler.TSDLayout, tp uint64, k uint64) uint64 {
	t.Helper()
	if k < 1<<l.BlockShift {
		base := tp
		if l.Self != profiler.PythonNoOffset {
			base = readMem(t, mem, tp+uint64(l.Self))
		}
		return base + uint64(l.First) + k*uint64(l.Entry) + uint64(l.Data)
	}
	block := readMem(t, mem, tp+uint64(l.Second)+(k>>l.BlockShift)*8)
	return block + (k&(1<<l.BlockShift-1))*uint64(l.Entry) + uint64(l.Data)
}
