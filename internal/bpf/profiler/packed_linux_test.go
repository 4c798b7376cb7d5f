//go:build linux && (amd64 || arm64)

package profiler

import (
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"
)

// packedRecord lays out a packed record as the BPF side writes one.
func packedRecord(flags uint32, kernelBytes, userBytes int32, kernel, user []uint64, frames []InterpFrame) []byte {
	var head profilerSample
	head.Pid, head.Tid, head.Flags = 7, 8, flags|packedFlag
	head.KernelBytes, head.UserBytes = kernelBytes, userBytes
	raw := slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&head)), packedHead))
	for _, w := range append(slices.Clone(kernel), user...) {
		raw = binary.LittleEndian.AppendUint64(raw, w)
	}
	raw = binary.LittleEndian.AppendUint32(raw, uint32(len(frames)))
	raw = binary.LittleEndian.AppendUint32(raw, uint32(InterpStopEnd))
	for _, f := range frames {
		raw = binary.LittleEndian.AppendUint64(raw, f.Object)
		raw = binary.LittleEndian.AppendUint32(raw, f.Offset)
		raw = binary.LittleEndian.AppendUint16(raw, f.Anchor)
		raw = append(raw, byte(f.Kind), 0)
	}
	return raw
}

// TestPackedRecordDecodesAsWhole decodes a packed record to the sample a
// whole one gives, and one whose lengths claim more than it holds to
// stacks read as errors, never past its end.
func TestPackedRecordDecodesAsWhole(t *testing.T) {
	kernel := []uint64{0xffffffff81000010}
	user := []uint64{0x401000, 0x402000, 0x403000}
	frames := []InterpFrame{{Object: 0x7000, Offset: 12, Anchor: 1, Kind: InterpKind(profilerInterpFrameKindINTERP_FRAME_CPYTHON)}}
	raw := packedRecord(uint32(profilerSampleFlagSAMPLE_CFI), 8, 24, kernel, user, frames)
	if !packed(raw) {
		t.Fatal("a record flagged SAMPLE_PACKED is not seen packed")
	}
	var u unpacker
	var got Sample
	rec, tail := u.of(raw)
	decode(rec, tail, &got)
	if got.PID != 7 || got.TID != 8 || !got.CFI || !slices.Equal(got.Kernel, kernel) || !slices.Equal(got.User, user) {
		t.Fatalf("decoded %+v", got)
	}
	if len(got.Interp) != 1 || got.Interp[0] != frames[0] || got.InterpStop != InterpStopEnd {
		t.Fatalf("interpreter frames %+v stop %v, want %+v", got.Interp, got.InterpStop, frames)
	}

	// A user stack longer than the record: no user frames, no
	// interpreter tail read from its words.
	bad := packedRecord(0, 8, 8*100, kernel, user, nil)
	rec, tail = u.of(bad)
	decode(rec, tail, &got)
	if len(got.User) != 0 || rec.UserBytes >= 0 || !slices.Equal(got.Kernel, kernel) {
		t.Fatalf("a user stack past the record's end decoded as %v (%d bytes)", got.User, rec.UserBytes)
	}
}

// FuzzUnpack feeds arbitrary records flagged packed to the decoder: it
// never reads past a record or panics.
func FuzzUnpack(f *testing.F) {
	f.Add(packedRecord(0, 8, 16, []uint64{1}, []uint64{2, 3}, []InterpFrame{{Object: 9}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !packed(raw) {
			return
		}
		var u unpacker
		var s Sample
		rec, tail := u.of(raw)
		decode(rec, tail, &s)
		if len(s.Kernel)+len(s.User) > len(raw)/8 {
			t.Fatalf("%d stack words from a record of %d bytes", len(s.Kernel)+len(s.User), len(raw))
		}
	})
}
