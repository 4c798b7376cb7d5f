//go:build linux && (amd64 || arm64)

package profiler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The Go mirrors of the C interpreter structures must keep their sizes:
// a size apart fails the build.
var (
	_ [0]struct{} = [unsafe.Sizeof(profilerInterpFrame{}) - interpFrameBytes]struct{}{}
	_ [0]struct{} = [interpFrameBytes - unsafe.Sizeof(profilerInterpFrame{})]struct{}{}
	_ [0]struct{} = [MaxInterpFrames + 1 - len(profilerSampleInterp{}.Frames)]struct{}{}
)

const (
	interpFrameBytes = 16
	// interpTail is where a record's interpreter tail starts: its frame
	// count and stop reason, then the frames.
	interpTail     = int(unsafe.Offsetof(profilerSampleInterp{}.InterpFrames))
	interpFramesAt = int(unsafe.Offsetof(profilerSampleInterp{}.Frames))
)

// configurePython turns the walk of CPython frames on.
func configurePython(spec *ebpf.CollectionSpec, opts Options) error {
	if !opts.Python {
		return nil
	}
	if err := spec.Variables[profilerVarPythonFrames].Set(true); err != nil {
		return fmt.Errorf("enabling CPython frames: %w", err)
	}
	return nil
}

// decodeInterp appends the interpreter frames of a record's tail (its
// bytes from interp_frames on; nil for a record without one) to dst.
func decodeInterp(tail []byte, dst []InterpFrame) ([]InterpFrame, InterpStop) {
	const framesAt = interpFramesAt - interpTail
	if len(tail) < framesAt {
		return dst, InterpStopEnd
	}
	n := int(binary.LittleEndian.Uint32(tail))
	stop := InterpStop(binary.LittleEndian.Uint32(tail[4:]))
	// The kernel sends at most the frames it wrote: a count beyond the
	// record is never trusted.
	n = min(n, MaxInterpFrames+1, (len(tail)-framesAt)/interpFrameBytes)
	for i := range n {
		b := tail[framesAt+i*interpFrameBytes:]
		dst = append(dst, InterpFrame{
			Object:   binary.LittleEndian.Uint64(b),
			Offset:   binary.LittleEndian.Uint32(b[8:]),
			Anchor:   binary.LittleEndian.Uint16(b[12:]),
			Kind:     InterpKind(b[14]),
			NoOffset: b[15]&uint8(profilerInterpFrameFlagINTERP_FRAME_NO_OFFSET) != 0,
			AtNative: b[15]&uint8(profilerInterpFrameFlagINTERP_FRAME_AT_NATIVE) != 0,
		})
	}
	return dst, stop
}

// SetPythonProc gives process pid's samples their CPython frames, walked
// as p says.
func (s *Sampler) SetPythonProc(pid uint32, p PythonProc) error {
	if err := p.check(); err != nil {
		return fmt.Errorf("setting CPython layout of pid %d: %w", pid, err)
	}
	v := profilerPyProc{
		TssKey:        p.TSSKey,
		DtvEntry:      p.DTVEntry,
		TlsOffset:     p.TLSOffset,
		TsdSelf:       p.TSD.Self,
		TsdFirst:      p.TSD.First,
		TsdSecond:     p.TSD.Second,
		DtvOffset:     p.DTVOffset,
		TsdEntry:      p.TSD.Entry,
		TsdData:       p.TSD.Data,
		TsdBlockShift: p.TSD.BlockShift,
		TstateVia:     uint8(p.TState),
		TstateFrame:   p.TStateFrame,
		CframeFrame:   p.CFrameFrame,
		FramePrevious: p.FramePrevious,
		FrameCode:     p.FrameCode,
		FrameInstr:    p.FrameInstr,
		FrameEntry:    p.Entry,
		FrameBytes:    p.FrameBytes,
		CodeInsns:     p.CodeInsns,
		FrameLayout:   uint8(p.Layout),
		ShimOwner:     p.ShimOwner,
		LastiScale:    p.LastiScale,
	}
	if p.TSSInitialized {
		v.TssInitialized = 1
	}
	if err := setInterpProc(s, pid, profilerInterpProcKindINTERP_PROC_CPYTHON, &v); err != nil {
		return fmt.Errorf("setting CPython layout of pid %d: %w", pid, err)
	}
	return nil
}

// DeletePythonProc stops walking process pid's CPython frames. Deleting
// an unknown process is not an error.
func (s *Sampler) DeletePythonProc(pid uint32) error {
	if err := s.deleteInterpProc(pid, profilerInterpProcKindINTERP_PROC_CPYTHON); err != nil {
		return fmt.Errorf("deleting CPython layout of pid %d: %w", pid, err)
	}
	return nil
}

// check refuses a layout the walk would read outside a frame with: the
// BPF side masks the offsets, which keeps it safe but not right.
func (p *PythonProc) check() error {
	if p.FrameBytes < 16 || p.FrameBytes > PythonFrameBytesMax {
		return fmt.Errorf("frame read of %d bytes: outside [16, %d]", p.FrameBytes, PythonFrameBytesMax)
	}
	fits := func(name string, off uint16, size, align uint16) error {
		if off%align != 0 || off+size > p.FrameBytes {
			return fmt.Errorf("frame field %s at %d: not a %d-byte field within the %d bytes read", name, off, size, p.FrameBytes)
		}
		return nil
	}
	instr := uint16(8)
	if p.Layout == PythonFrameObjects {
		instr = 4
	}
	entryErr := error(nil)
	if p.Layout != PythonFrameObjects {
		entryErr = fits("entry", p.Entry, 1, 1)
	}
	return errors.Join(
		fits("previous", p.FramePrevious, 8, 8),
		fits("code", p.FrameCode, 8, 8),
		fits("instruction", p.FrameInstr, instr, instr),
		entryErr,
	)
}
