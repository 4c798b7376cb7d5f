//go:build linux && (amd64 || arm64)

package profiler

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// TestInterpProcsBoundEachRuntime fills the one map of interpreter
// processes: each runtime stops at its own bound while another still has
// room, a process given its runtime again takes no second place, a
// deleted one frees its place, and the entry holds the kind and the
// runtime's layout where the BPF union has it.
func TestInterpProcsBoundEachRuntime(t *testing.T) {
	testenv.RequireBPF(t)
	s, err := New(Options{Frequency: 1, PID: os.Getpid(), Python: true, V8: true, PythonProcesses: 2, V8Processes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	py := func(pid uint32) error {
		return setInterpProc(s, pid, profilerInterpProcKindINTERP_PROC_CPYTHON, &profilerPyProc{FrameBytes: 64})
	}
	v8 := profilerV8Proc{FpContext: 1, FpFunction: 2, FpBytecodeArray: 3, FpBytecodeOffset: 4, FunctionShared: 5, SharedFunctionData: 6}
	for _, pid := range []uint32{10, 11, 11} {
		if err := py(pid); err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
	}
	if err := py(12); !errors.Is(err, errInterpProcsFull) {
		t.Fatalf("a third CPython process under a bound of 2: %v", err)
	}
	if err := setInterpProc(s, 20, profilerInterpProcKindINTERP_PROC_V8, &v8); err != nil {
		t.Fatalf("a V8 process beside two CPython ones: %v", err)
	}
	// A process of another runtime is not deleted as this one's.
	if err := s.DeletePythonProc(20); err != nil {
		t.Fatal(err)
	}
	var e profilerInterpProc
	if err := s.objs.InterpProcs.Lookup(uint32(20), &e); err != nil {
		t.Fatalf("the V8 entry: %v", err)
	}
	body := unsafe.Slice((*byte)(unsafe.Pointer(&e.Py)), unsafe.Sizeof(v8))
	if e.Kind != uint32(profilerInterpProcKindINTERP_PROC_V8) || !bytes.Equal(body, unsafe.Slice((*byte)(unsafe.Pointer(&v8)), unsafe.Sizeof(v8))) {
		t.Fatalf("the V8 entry reads kind %d, layout % x", e.Kind, body)
	}
	if err := s.DeletePythonProc(10); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.InterpProcs.Lookup(uint32(10), &e); err == nil {
		t.Fatal("a deleted process is still in the map")
	}
	if err := py(12); err != nil {
		t.Fatalf("a CPython process after one was deleted: %v", err)
	}
}
