package profiler

import (
	"errors"
	"fmt"
)

// InterpHotSpot is a HotSpot frame: Object is an nmethod or stub (a code
// blob) and Offset the offset in its code of the instruction that runs (a
// return address less one), or Object is an interpreted Method* and Offset
// its bytecode index. Object's top 16 bits hold an identity check (see
// HotSpotIdentity); the frame is the native frame User[Anchor].
const InterpHotSpot InterpKind = 3

// HotSpotIdentity splits a HotSpot frame's Object into the object's
// address and the identity check the sampler read with it: the nmethod's
// compile id, or the Method's ConstMethod address shifted right by 3, each
// in 16 bits; 0 for a stub.
func HotSpotIdentity(object uint64) (addr uint64, check uint16) {
	return object & (1<<48 - 1), uint16(object >> 48)
}

// HotSpotMaxHeaps is how many code heaps a HotSpotProc holds.
const HotSpotMaxHeaps = 4

// HotSpotBlockBytes bounds HotSpotProc.BlockBytes: every code blob field
// the walk reads lies within it.
const HotSpotBlockBytes = 512

// hotSpotFPSlots is how many words below an interpreter frame's frame
// pointer the walk reads (HS_FP_SLOTS).
const hotSpotFPSlots = 14

// HotSpotHeap is one code heap of a JVM's code cache: its reserved code
// memory [Low, High) and its segment map.
type HotSpotHeap struct {
	Low, High, Segmap uint64
}

// HotSpotProc is what the sampler needs to walk the Java frames of one
// JVM: its code cache and the layout of its code blobs, methods and
// interpreter frames, all read from the JVM's own vmStructs. Every field
// mirrors struct hs_proc in bpfcol_hotspot.h.
type HotSpotProc struct {
	// CacheLow and CacheHigh bound the code cache: every PC in it is
	// the JVM's code.
	CacheLow, CacheHigh uint64
	// InterpLow and InterpHigh bound the template interpreter's code.
	InterpLow, InterpHigh uint64
	Heaps                 []HotSpotHeap
	// SegmentShift is log2 of the code heaps' segment size.
	SegmentShift uint8
	// BlockHeader is sizeof(HeapBlock), BlockUsed the offset of its
	// _used flag; BlockBytes how much of a block the walk reads.
	BlockHeader, BlockUsed, BlockBytes uint16
	// Offsets in a code blob of its fields.
	BlobName, BlobFrameComplete, BlobFrameSize, BlobCodeBegin uint16
	NMethodCompileID, NMethodOrigPC, NMethodDeoptHandler      uint16
	// MethodConst is the offset of Method::_constMethod; ConstBytes the
	// size of a ConstMethod, which its bytecodes follow.
	MethodConst, ConstBytes uint16
	// FPMethod, FPBCP and FPSenderSP are the slots, in words from an
	// interpreter frame's frame pointer, of its Method*, its bytecode
	// pointer and its caller's stack pointer.
	FPMethod, FPBCP, FPSenderSP int8
}

// check refuses a layout the walk would read outside what it reads with:
// the BPF side masks offsets, which keeps it safe but not right.
func (p *HotSpotProc) check() error {
	if len(p.Heaps) == 0 || len(p.Heaps) > HotSpotMaxHeaps {
		return fmt.Errorf("%d code heaps: outside [1, %d]", len(p.Heaps), HotSpotMaxHeaps)
	}
	if p.CacheLow >= p.CacheHigh || p.InterpLow > p.InterpHigh {
		return errors.New("empty code cache")
	}
	for _, h := range p.Heaps {
		if h.Low >= h.High || h.Low < p.CacheLow || h.High > p.CacheHigh || h.Segmap == 0 {
			return fmt.Errorf("code heap [%#x, %#x) outside the code cache [%#x, %#x)", h.Low, h.High, p.CacheLow, p.CacheHigh)
		}
	}
	if p.SegmentShift < 4 || p.SegmentShift > 16 {
		return fmt.Errorf("segment size 2^%d: outside [2^4, 2^16]", p.SegmentShift)
	}
	if p.BlockBytes < 16 || p.BlockBytes > HotSpotBlockBytes {
		return fmt.Errorf("block read of %d bytes: outside [16, %d]", p.BlockBytes, HotSpotBlockBytes)
	}
	fits := func(name string, off, size uint16) error {
		if uint32(p.BlockHeader)+uint32(off)+uint32(size) > uint32(p.BlockBytes) {
			return fmt.Errorf("code blob field %s at %d: not within the %d bytes read", name, off, p.BlockBytes)
		}
		return nil
	}
	slot := func(name string, s int8) error {
		if s >= 0 || s < -hotSpotFPSlots {
			return fmt.Errorf("interpreter frame slot %s at %d: outside [-%d, -1]", name, s, hotSpotFPSlots)
		}
		return nil
	}
	var used error
	if p.BlockUsed >= p.BlockHeader {
		used = fmt.Errorf("HeapBlock's used flag at %d: beyond its %d bytes", p.BlockUsed, p.BlockHeader)
	}
	return errors.Join(used,
		fits("_name", p.BlobName, 8),
		fits("_frame_complete_offset", p.BlobFrameComplete, 4),
		fits("_frame_size", p.BlobFrameSize, 4),
		fits("_code_begin", p.BlobCodeBegin, 8),
		fits("_compile_id", p.NMethodCompileID, 4),
		fits("_orig_pc_offset", p.NMethodOrigPC, 4),
		fits("_deopt_handler_begin", p.NMethodDeoptHandler, 8),
		slot("method", p.FPMethod), slot("bcp", p.FPBCP), slot("sender_sp", p.FPSenderSP),
	)
}
