package hotspot

import (
	"fmt"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp"
)

// codeCache is where one JVM keeps its code: the code cache's bounds, its
// code heaps with their segment maps, and the template interpreter.
type codeCache struct {
	low, high      uint64
	interp         interp.Range
	heaps          []profiler.HotSpotHeap
	segmentShift   uint8
	callStubReturn uint64
}

// readCodeCache reads the code cache of the JVM whose libjvm is loaded
// with bias. A JVM that has not created it yet gives an error wrapping
// interp.ErrNotReady.
func readCodeCache(r *reader, bias uint64) (*codeCache, error) {
	l := r.l
	word := func(addr uint64) (uint64, error) {
		b, err := r.read(addr, 8)
		if err != nil {
			return 0, err
		}
		return u64(b, 0), nil
	}
	c := &codeCache{}
	var err error
	if c.low, err = word(l.codeCacheLow + bias); err != nil {
		return nil, fmt.Errorf("reading CodeCache::_low_bound: %w", err)
	}
	if c.high, err = word(l.codeCacheHigh + bias); err != nil {
		return nil, fmt.Errorf("reading CodeCache::_high_bound: %w", err)
	}
	heaps, err := word(l.codeCacheHeaps + bias)
	if err != nil {
		return nil, fmt.Errorf("reading CodeCache::_heaps: %w", err)
	}
	queue, err := word(l.interpreterCode + bias)
	if err != nil {
		return nil, fmt.Errorf("reading AbstractInterpreter::_code: %w", err)
	}
	if c.low == 0 || c.high == 0 || heaps == 0 || queue == 0 {
		return nil, fmt.Errorf("the code cache: %w", interp.ErrNotReady)
	}
	if c.low >= c.high {
		return nil, fmt.Errorf("code cache [%#x, %#x): empty", c.low, c.high)
	}
	arr, err := r.read(heaps, max(l.arrayLen+4, l.arrayData+8))
	if err != nil {
		return nil, fmt.Errorf("reading the code heaps: %w", err)
	}
	n := uint64(u32(arr, l.arrayLen))
	if n == 0 {
		return nil, fmt.Errorf("the code heaps: %w", interp.ErrNotReady)
	}
	if n > profiler.HotSpotMaxHeaps {
		return nil, fmt.Errorf("%w: %d code heaps (at most %d)", interp.ErrUnsupported, n, profiler.HotSpotMaxHeaps)
	}
	ptrs, err := r.read(u64(arr, l.arrayData), 8*n)
	if err != nil {
		return nil, fmt.Errorf("reading the code heaps: %w", err)
	}
	heapBytes := max(l.heapMemory, l.heapSegmap) + max(l.vsLowBoundary, l.vsHighBoundary) + 8
	heapBytes = max(heapBytes, l.heapLog2Segment+4)
	for i := range n {
		h, err := r.read(u64(ptrs, 8*i), heapBytes)
		if err != nil {
			return nil, fmt.Errorf("reading code heap %d: %w", i, err)
		}
		heap := profiler.HotSpotHeap{
			Low:    u64(h, l.heapMemory+l.vsLowBoundary),
			High:   u64(h, l.heapMemory+l.vsHighBoundary),
			Segmap: u64(h, l.heapSegmap+l.vsLowBoundary),
		}
		shift := u32(h, l.heapLog2Segment)
		if heap.Low == 0 || heap.Segmap == 0 {
			return nil, fmt.Errorf("code heap %d: %w", i, interp.ErrNotReady)
		}
		if heap.Low >= heap.High || heap.Low < c.low || heap.High > c.high {
			return nil, fmt.Errorf("code heap [%#x, %#x): outside the code cache [%#x, %#x)", heap.Low, heap.High, c.low, c.high)
		}
		if i > 0 && uint32(c.segmentShift) != shift {
			return nil, fmt.Errorf("%w: code heaps of segments of 2^%d and 2^%d bytes", interp.ErrUnsupported, c.segmentShift, shift)
		}
		if shift < 4 || shift > 16 {
			return nil, fmt.Errorf("code heap %d: segments of 2^%d bytes", i, shift)
		}
		c.segmentShift = uint8(shift)
		c.heaps = append(c.heaps, heap)
	}
	q, err := r.read(queue, max(l.queueBuffer+8, l.queueLimit+4))
	if err != nil {
		return nil, fmt.Errorf("reading the interpreter's code: %w", err)
	}
	start, size := u64(q, l.queueBuffer), uint64(u32(q, l.queueLimit))
	if start < c.low || start+size > c.high || size == 0 {
		return nil, fmt.Errorf("interpreter code [%#x, +%d): outside the code cache", start, size)
	}
	c.interp = interp.Range{Start: start, End: start + size}
	if c.callStubReturn, err = word(l.callStubReturn + bias); err != nil {
		return nil, fmt.Errorf("reading StubRoutines::_call_stub_return_address: %w", err)
	}
	return c, nil
}

// proc is what the sampler walks this JVM's frames with.
func (c *codeCache) proc(l *layout) profiler.HotSpotProc {
	return profiler.HotSpotProc{
		CacheLow:            c.low,
		CacheHigh:           c.high,
		InterpLow:           c.interp.Start,
		InterpHigh:          c.interp.End,
		Heaps:               c.heaps,
		SegmentShift:        c.segmentShift,
		BlockHeader:         uint16(l.blockHeader),
		BlockUsed:           uint16(l.blockUsed),
		BlockBytes:          uint16(l.blockHeader + l.walkBlobBytes()),
		BlobName:            uint16(l.blobName),
		BlobFrameComplete:   uint16(l.blobFrameComplete),
		BlobFrameSize:       uint16(l.blobFrameSize),
		BlobCodeBegin:       uint16(l.blobCodeBegin),
		NMethodCompileID:    uint16(l.nmCompileID),
		NMethodOrigPC:       uint16(l.nmOrigPC),
		NMethodDeoptHandler: uint16(l.nmDeoptHandler),
		MethodConst:         uint16(l.methodConst),
		ConstBytes:          uint16(l.constSize),
		FPMethod:            l.fpMethod,
		FPBCP:               l.fpBCP,
		FPSenderSP:          l.fpSenderSP,
	}
}
