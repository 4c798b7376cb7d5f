//go:build linux && (amd64 || arm64)

package profiler

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// configureV8 turns the reading of V8 frames on.
func configureV8(spec *ebpf.CollectionSpec, opts Options) error {
	if !opts.V8 {
		return nil
	}
	if err := spec.Variables[profilerVarV8Frames].Set(true); err != nil {
		return fmt.Errorf("enabling V8 frames: %w", err)
	}
	return nil
}

// SetV8Proc gives process pid's samples their V8 frames, read as p says.
func (s *Sampler) SetV8Proc(pid uint32, p V8Proc) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("setting V8 layout of pid %d: %w", pid, err)
	}
	v := profilerV8Proc{
		FpContext:          p.FPContext,
		FpFunction:         p.FPFunction,
		FpBytecodeArray:    p.FPBytecodeArray,
		FpBytecodeOffset:   p.FPBytecodeOffset,
		FunctionShared:     p.FunctionShared,
		SharedFunctionData: p.SharedFunctionData,
	}
	if err := setInterpProc(s, pid, profilerInterpProcKindINTERP_PROC_V8, &v); err != nil {
		return fmt.Errorf("setting V8 layout of pid %d: %w", pid, err)
	}
	return nil
}

// DeleteV8Proc stops reading process pid's V8 frames. Deleting an unknown
// process is not an error.
func (s *Sampler) DeleteV8Proc(pid uint32) error {
	if err := s.deleteInterpProc(pid, profilerInterpProcKindINTERP_PROC_V8); err != nil {
		return fmt.Errorf("deleting V8 layout of pid %d: %w", pid, err)
	}
	return nil
}
