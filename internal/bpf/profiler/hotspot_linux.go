//go:build linux && (amd64 || arm64)

package profiler

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// configureHotSpot turns the walk of HotSpot frames on.
func configureHotSpot(spec *ebpf.CollectionSpec, opts Options) error {
	if !opts.HotSpot {
		return nil
	}
	if err := spec.Variables[profilerVarHotspotFrames].Set(true); err != nil {
		return fmt.Errorf("enabling HotSpot frames: %w", err)
	}
	return nil
}

// SetHotSpotProc gives process pid's samples their Java frames, walked as
// p says.
func (s *Sampler) SetHotSpotProc(pid uint32, p HotSpotProc) error {
	if err := p.check(); err != nil {
		return fmt.Errorf("setting HotSpot layout of pid %d: %w", pid, err)
	}
	v := profilerHsProc{
		CacheLow:          p.CacheLow,
		CacheHigh:         p.CacheHigh,
		InterpLow:         p.InterpLow,
		InterpHigh:        p.InterpHigh,
		HeapCount:         uint32(len(p.Heaps)),
		BlockHeader:       p.BlockHeader,
		BlockUsed:         p.BlockUsed,
		BlockBytes:        p.BlockBytes,
		BlobName:          p.BlobName,
		BlobFrameComplete: p.BlobFrameComplete,
		BlobFrameSize:     p.BlobFrameSize,
		BlobCodeBegin:     p.BlobCodeBegin,
		NmCompileId:       p.NMethodCompileID,
		NmOrigPc:          p.NMethodOrigPC,
		NmDeoptHandler:    p.NMethodDeoptHandler,
		MethodConst:       p.MethodConst,
		ConstBytes:        p.ConstBytes,
		FpMethod:          p.FPMethod,
		FpBcp:             p.FPBCP,
		FpSenderSp:        p.FPSenderSP,
		SegmentShift:      p.SegmentShift,
	}
	for i, h := range p.Heaps {
		v.Heaps[i] = profilerHsHeap{Low: h.Low, High: h.High, Segmap: h.Segmap}
	}
	if err := setInterpProc(s, pid, profilerInterpProcKindINTERP_PROC_HOTSPOT, &v); err != nil {
		return fmt.Errorf("setting HotSpot layout of pid %d: %w", pid, err)
	}
	return nil
}

// DeleteHotSpotProc stops walking process pid's Java frames. Deleting an
// unknown process is not an error.
func (s *Sampler) DeleteHotSpotProc(pid uint32) error {
	if err := s.deleteInterpProc(pid, profilerInterpProcKindINTERP_PROC_HOTSPOT); err != nil {
		return fmt.Errorf("deleting HotSpot layout of pid %d: %w", pid, err)
	}
	return nil
}
