package ringrec

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// testRecord stands for a bpf2go-generated record type.
type testRecord struct {
	Ktime uint64
	PID   uint32
	Flags uint32
	Comm  [16]int8
}

// writer is a syscall program that copies its context, the first size
// bytes of a testRecord, into the ringbuf with bpf_ringbuf_output.
type writer struct {
	ring *ebpf.Map
	prog *ebpf.Program
}

func newWriter(t *testing.T, size int) *writer {
	t.Helper()
	testenv.RequireBPF(t)
	ring, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: Size(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ring.Close() })
	// The context is a whole testRecord: copy it to the stack, which
	// ringbuf_output reads, and output its first size bytes.
	const words = int16(unsafe.Sizeof(testRecord{}) / 8)
	var insns asm.Instructions
	for i := range words {
		insns = append(insns,
			asm.LoadMem(asm.R3, asm.R1, 8*i, asm.DWord),
			asm.StoreMem(asm.RFP, -8*words+8*i, asm.R3, asm.DWord))
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8*int32(words)),
		asm.LoadMapPtr(asm.R1, ring.FD()),
		asm.Mov.Imm(asm.R3, int32(size)),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Syscall,
		Flags:        unix.BPF_F_SLEEPABLE,
		License:      "GPL",
		Instructions: insns,
	})
	if err != nil {
		t.Fatalf("loading ringbuf writer: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return &writer{ring: ring, prog: prog}
}

func (w *writer) write(t *testing.T, rec testRecord) {
	t.Helper()
	ctx := unsafe.Slice((*byte)(unsafe.Pointer(&rec)), unsafe.Sizeof(rec))
	ret, err := w.prog.Run(&ebpf.RunOptions{Context: ctx})
	if err != nil || ret != 0 {
		t.Fatalf("writing record: ret %d, %v", int32(ret), err)
	}
}

func comm(s string) (c [16]int8) {
	for i := range min(len(s), len(c)) {
		c[i] = int8(s[i])
	}
	return c
}

// TestReadRecords writes records from BPF and reads them back in order,
// field by field.
func TestReadRecords(t *testing.T) {
	w := newWriter(t, int(unsafe.Sizeof(testRecord{})))
	r, err := NewReader[testRecord](w.ring, "test record")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := []testRecord{
		{Ktime: 1 << 40, PID: 7, Flags: 3, Comm: comm("worker")},
		{Ktime: 2, PID: 1 << 31, Flags: 0, Comm: comm("0123456789abcdef")},
	}
	for _, rec := range want {
		w.write(t, rec)
	}
	r.SetDeadline(time.Now().Add(5 * time.Second))
	for i, rec := range want {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if *got != rec {
			t.Errorf("record %d: got %+v, want %+v", i, *got, rec)
		}
	}
}

// TestComm checks the name before the NUL, the whole 16 bytes without one,
// and that an equal previous name is returned without allocating.
func TestComm(t *testing.T) {
	worker, full := comm("worker"), comm("0123456789abcdef")
	if got := Comm(&worker, ""); got != "worker" {
		t.Errorf("comm %q, want worker", got)
	}
	if got := Comm(&full, "worker"); got != "0123456789abcdef" {
		t.Errorf("comm without NUL %q, want all 16 bytes", got)
	}
	prev := "worker"
	if allocs := testing.AllocsPerRun(100, func() { _ = Comm(&worker, prev) }); allocs != 0 {
		t.Errorf("%v allocations for an unchanged name, want 0", allocs)
	}
	var empty [16]int8
	if got := Comm(&empty, "worker"); got != "" {
		t.Errorf("empty comm %q, want \"\"", got)
	}
}

// TestReadShortRecord checks that a record shorter than T is an error,
// not a partly filled T.
func TestReadShortRecord(t *testing.T) {
	w := newWriter(t, 8)
	r, err := NewReader[testRecord](w.ring, "test record")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.write(t, testRecord{Ktime: 1})
	r.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Read(); err == nil || errors.Is(err, ErrDeadline) {
		t.Fatalf("short record read with error %v, want a size error", err)
	}
}

// TestReadDeadlineFlushClose checks the ends of a Read: the deadline with
// an empty ringbuf, Flush after the records present, and Close.
func TestReadDeadlineFlushClose(t *testing.T) {
	w := newWriter(t, int(unsafe.Sizeof(testRecord{})))
	r, err := NewReader[testRecord](w.ring, "test record")
	if err != nil {
		t.Fatal(err)
	}
	r.SetDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := r.Read(); !errors.Is(err, ErrDeadline) {
		t.Fatalf("read past the deadline: %v, want ErrDeadline", err)
	}
	r.SetDeadline(time.Time{})
	w.write(t, testRecord{PID: 42})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Read(); err != nil || got.PID != 42 {
		t.Fatalf("read after flush: %+v, %v; want the record present at flush", got, err)
	}
	if _, err := r.Read(); !errors.Is(err, ErrFlushed) {
		t.Fatalf("read after the flushed records: %v, want ErrFlushed", err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Read(); done <- err }()
	time.Sleep(10 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked read after close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake a blocked read")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	var nilReader *Reader[testRecord]
	if err := nilReader.Close(); err != nil {
		t.Fatalf("close of a nil reader: %v", err)
	}
}

// TestSize checks the rounding of ringbuf sizes.
func TestSize(t *testing.T) {
	page := uint32(unix.Getpagesize())
	for _, c := range []struct {
		in   int
		want uint32
	}{
		{0, page}, {-1, page}, {1, page}, {int(page), page}, {int(page) + 1, 2 * page},
		{3 << 20, 4 << 20}, {4 << 20, 4 << 20}, {1 << 30, MaxSize},
	} {
		if got := Size(c.in); got != c.want {
			t.Errorf("Size(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestReadWakesOnRecord checks that a Read waiting without a deadline
// wakes for a record the kernel wakes readers for (the first into an empty
// ringbuf), and that Flush wakes a waiting Read.
func TestReadWakesOnRecord(t *testing.T) {
	w := newWriter(t, int(unsafe.Sizeof(testRecord{})))
	r, err := NewReader[testRecord](w.ring, "test record")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type result struct {
		pid uint32
		err error
	}
	read := func() <-chan result {
		done := make(chan result, 1)
		go func() {
			got, err := r.Read()
			if err != nil {
				done <- result{err: err}
				return
			}
			done <- result{pid: got.PID}
		}()
		return done
	}
	for i := range 3 {
		done := read()
		time.Sleep(20 * time.Millisecond)
		w.write(t, testRecord{PID: uint32(100 + i)})
		select {
		case got := <-done:
			if got.err != nil || got.pid != uint32(100+i) {
				t.Fatalf("read %d: pid %d, %v; want pid %d", i, got.pid, got.err, 100+i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("read %d: a written record did not wake the waiting read", i)
		}
	}
	done := read()
	time.Sleep(20 * time.Millisecond)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if !errors.Is(got.err, ErrFlushed) {
			t.Fatalf("waiting read after flush: %v, want ErrFlushed", got.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flush did not wake a waiting read")
	}
	// After the flush was read, Reads wait again, up to their deadline.
	r.SetDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	if _, err := r.Read(); !errors.Is(err, ErrDeadline) {
		t.Fatalf("read after the flush: %v, want ErrDeadline", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("read after the flush returned after %s, before its deadline", waited)
	}
}
