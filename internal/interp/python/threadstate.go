package python

import (
	"fmt"
	"slices"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/interp/threadlocal"
	"github.com/bpfcol/bpfcol/internal/interp/x86sym"
)

// maxStubCode bounds the code read of the small functions decoded here.
const maxStubCode = 256

// tssFunc returns the calling thread's thread state from its
// pthread-specific data: the key it passes is autoTSSkey's.
const tssFunc = "PyGILState_GetThisThreadState"

// Functions that take a Py_tss_t *, and those that take the key itself.
var (
	takesTSS = []string{"PyThread_tss_get", "PyThread_tss_is_created"}
	takesKey = append([]string{"PyThread_get_key_value"}, threadlocal.GetspecificSymbols...)
)

// tssKeyOffset is offsetof(Py_tss_t, _key): an int _is_initialized, then
// the pthread_key_t (Include/cpython/pythread.h, 3.7+).
const tssKeyOffset = 4

// relocatedGlobal resolves the loads of GOT slots the loader fills with
// this file's own addresses.
func relocatedGlobal(img *elfimage.Image) func(addr uint64, size int) (int64, bool) {
	return func(addr uint64, size int) (int64, bool) {
		if size != 8 {
			return 0, false
		}
		v, ok := img.Relocated(addr)
		return int64(v), ok
	}
}

// tssKey finds the pthread key of the thread states by running
// PyGILState_GetThisThreadState up to its first call: the argument is
// the address of the Py_tss_t (3.7+: PyThread_tss_get, or
// PyThread_tss_is_created first), or the key loaded from its address
// (3.6's PyThread_get_key_value, or pthread_getspecific inlined).
func tssKey(img *elfimage.Image, v Version) (addr uint64, inTSS bool, err error) {
	sym, code, err := img.Code(tssFunc, maxStubCode)
	if err != nil {
		return 0, false, err
	}
	m := x86sym.Machine{Code: code, Addr: sym.Value, Global: relocatedGlobal(img)}
	res, err := m.Run()
	if err != nil {
		return 0, false, fmt.Errorf("decoding %s: %w", tssFunc, err)
	}
	if res.Stop != x86sym.Called {
		return 0, false, fmt.Errorf("decoding %s: returns before it calls", tssFunc)
	}
	callee, _ := img.Callee(res.Target)
	arg := res.Args
	switch {
	case arg.IsConst() && slices.Contains(takesTSS, callee) && v.atLeast(7):
		return uint64(arg.Const) + tssKeyOffset, true, nil
	case arg != nil && len(arg.Terms) == 1 && arg.Const == 0 && arg.Terms[0].Kind == x86sym.Load &&
		arg.Terms[0].Coef == 1 && arg.Terms[0].Addr.IsConst() && slices.Contains(takesKey, callee):
		return uint64(arg.Terms[0].Addr.Const), v.atLeast(7), nil
	}
	return 0, false, fmt.Errorf("decoding %s: calls %q (%#x) with %v: not a thread state key", tssFunc, callee, res.Target, arg)
}

// tlsKind is how code reaches a thread-local.
type tlsKind uint8

const (
	tlsNone tlsKind = iota
	// tlsGD: general dynamic, through __tls_get_addr and a tls_index
	// {module, offset} in the GOT (a shared library).
	tlsGD
	// tlsLE: local exec, a constant offset from the thread pointer (a
	// static executable).
	tlsLE
	// tlsIE: initial exec, an offset from the thread pointer the loader
	// writes into a GOT slot.
	tlsIE
)

// tlsAccess is how _PyThreadState_GetCurrent reads _Py_tss_tstate.
type tlsAccess struct {
	kind tlsKind
	// slot is the GOT address of the tls_index (tlsGD) or of the thread
	// pointer offset (tlsIE).
	slot uint64
	// offset is added to the address the slot leads to; with tlsLE it is
	// the offset from the thread pointer.
	offset int64
}

// tlsFunc returns the current thread state (3.13+).
const tlsFunc = "_PyThreadState_GetCurrent"

// findTLS decodes _PyThreadState_GetCurrent: it returns the value at an
// address that is a thread-local's.
func findTLS(img *elfimage.Image) (tlsAccess, error) {
	sym, code, err := img.Code(tlsFunc, maxStubCode)
	if err != nil {
		return tlsAccess{}, err
	}
	m := x86sym.Machine{
		Code: code, Addr: sym.Value, Global: relocatedGlobal(img),
		Call: func(target uint64, args *x86sym.Expr) (*x86sym.Expr, bool) {
			if name, _ := img.Callee(target); name == "__tls_get_addr" {
				return x86sym.Single(x86sym.Call, args, target), true
			}
			return nil, false
		},
	}
	res, err := m.Run()
	if err != nil {
		return tlsAccess{}, fmt.Errorf("decoding %s: %w", tlsFunc, err)
	}
	ret := res.Return
	if res.Stop != x86sym.Returned || ret == nil || len(ret.Terms) != 1 || ret.Const != 0 ||
		ret.Terms[0].Kind != x86sym.Load || ret.Terms[0].Coef != 1 {
		return tlsAccess{}, fmt.Errorf("decoding %s: returns %v, not a thread-local", tlsFunc, ret)
	}
	addr := ret.Terms[0].Addr
	_, call, rest := addr.Split(x86sym.Call)
	_, tp, restTP := addr.Split(x86sym.TP)
	switch {
	case call != nil && call.Coef == 1 && rest.IsConst() && call.Addr.IsConst() && img.TLSModuleSlot(uint64(call.Addr.Const)):
		return tlsAccess{kind: tlsGD, slot: uint64(call.Addr.Const), offset: rest.Const}, nil
	case tp != nil && tp.Coef == 1 && restTP.IsConst():
		return tlsAccess{kind: tlsLE, offset: restTP.Const}, nil
	case tp != nil && tp.Coef == 1 && len(restTP.Terms) == 1 && restTP.Terms[0].Kind == x86sym.Load &&
		restTP.Terms[0].Coef == 1 && restTP.Terms[0].Addr.IsConst() && img.TPOffsetSlot(uint64(restTP.Terms[0].Addr.Const)):
		return tlsAccess{kind: tlsIE, slot: uint64(restTP.Terms[0].Addr.Const), offset: restTP.Const}, nil
	}
	return tlsAccess{}, fmt.Errorf("decoding %s: reads the thread state at %v: no thread-local access known", tlsFunc, addr)
}

// memory reads a process's memory.
type memory interface {
	Uint64(addr uint64) (uint64, error)
}

// resolve fills p's thread-local fields for a process that loaded the
// file at bias: what the loader wrote into the GOT is read from the
// process; dtv is its dynamic loader's DTV layout (tlsGD).
func (a tlsAccess) resolve(p *profiler.PythonProc, mem memory, bias uint64, dtv *threadlocal.DTV) error {
	switch a.kind {
	case tlsGD:
		if dtv == nil {
			return fmt.Errorf("a thread-local through __tls_get_addr, and no dynamic loader's layout")
		}
		module, err := mem.Uint64(bias + a.slot)
		if err != nil {
			return fmt.Errorf("reading the TLS module id: %w", err)
		}
		off, err := mem.Uint64(bias + a.slot + 8)
		if err != nil {
			return fmt.Errorf("reading the TLS offset: %w", err)
		}
		// glibc numbers modules from 1; the DTV grows with them.
		if module == 0 || module > 1<<16 || off > 1<<30 {
			return fmt.Errorf("TLS module %d, offset %d: out of bounds", module, off)
		}
		p.TState, p.DTVOffset, p.DTVEntry = profiler.PythonTLSDTV, dtv.Offset, dtv.EntryOf(module)
		p.TLSOffset = int64(off) + a.offset
	case tlsLE:
		p.TState, p.TLSOffset = profiler.PythonTLSTP, a.offset
	case tlsIE:
		off, err := mem.Uint64(bias + a.slot)
		if err != nil {
			return fmt.Errorf("reading the thread pointer offset: %w", err)
		}
		p.TState, p.TLSOffset = profiler.PythonTLSTP, int64(off)+a.offset
	default:
		return fmt.Errorf("no thread-local access")
	}
	return nil
}
