// Package threadlocal reads, from the C library and the dynamic loader
// themselves, how a thread's data is found from its thread pointer: the
// pthread-specific data that pthread_getspecific returns, and the TLS
// block of a shared library that __tls_get_addr returns. Both functions
// are run symbolically (internal/interp/x86sym) and their result fitted to
// the layout the sampler walks; a libc whose code does not fit is refused,
// never guessed.
package threadlocal

import (
	"errors"
	"fmt"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/interp/x86sym"
)

// maxKeys is glibc's PTHREAD_KEYS_MAX: keys above it are refused.
const maxKeys = 1024

// maxCode bounds the machine code of one function read.
const maxCode = 512

// GetspecificSymbols are the names libcs give pthread_getspecific.
var GetspecificSymbols = []string{"__pthread_getspecific", "pthread_getspecific"}

// ErrNotFound is returned when the file does not define the function.
var ErrNotFound = errors.New("function not defined")

// TSD returns where the pthread_getspecific of img, a libc, finds the data
// of a key: it is run for every key, and the addresses it reads the data
// from must fit one TSDLayout.
func TSD(img *elfimage.Image) (profiler.TSDLayout, error) {
	var sym elfimage.Symbol
	var code []byte
	err := ErrNotFound
	for _, name := range GetspecificSymbols {
		if sym, code, err = img.Code(name, maxCode); err == nil {
			break
		}
	}
	if err != nil {
		return profiler.TSDLayout{}, fmt.Errorf("finding pthread_getspecific: %w", err)
	}
	addrs := make([]*x86sym.Expr, maxKeys)
	for k := range maxKeys {
		m := x86sym.Machine{Code: code, Addr: sym.Value, Arg: x86sym.Const(int64(k))}
		res, err := m.Run()
		if err != nil {
			return profiler.TSDLayout{}, fmt.Errorf("running pthread_getspecific(%d): %w", k, err)
		}
		addrs[k] = dataAddress(res)
		if addrs[k] == nil {
			if k == 0 {
				return profiler.TSDLayout{}, fmt.Errorf("pthread_getspecific(0) returns %v: not a load", res.Return)
			}
			break // keys from here on have no data
		}
	}
	return fitTSD(addrs)
}

// dataAddress returns the address whose contents a run returns, nil when
// it returns anything else.
func dataAddress(res *x86sym.Result) *x86sym.Expr {
	if res.Stop != x86sym.Returned || res.Return == nil || len(res.Return.Terms) != 1 || res.Return.Const != 0 {
		return nil
	}
	t := res.Return.Terms[0]
	if t.Kind != x86sym.Load || t.Coef != 1 {
		return nil
	}
	return t.Addr
}

// firstBlock splits an address of the first block: the thread pointer
// (self -1) or the pointer at self from it, plus a constant.
func firstBlock(a *x86sym.Expr) (self int64, off int64, ok bool) {
	if len(a.Terms) != 1 || a.Terms[0].Coef != 1 {
		return 0, 0, false
	}
	t := a.Terms[0]
	switch t.Kind {
	case x86sym.TP:
		return -1, a.Const, true
	case x86sym.Load:
		if c, tp := tpOffset(t.Addr); tp {
			return c, a.Const, true
		}
	}
	return 0, 0, false
}

// secondBlock splits an address of a second-level block: the pointer at
// a thread pointer offset, plus a constant.
func secondBlock(a *x86sym.Expr) (ptr int64, off int64, ok bool) {
	if len(a.Terms) != 1 || a.Terms[0].Coef != 1 || a.Terms[0].Kind != x86sym.Load {
		return 0, 0, false
	}
	c, tp := tpOffset(a.Terms[0].Addr)
	return c, a.Const, tp
}

// tpOffset returns c when e is the thread pointer plus c.
func tpOffset(e *x86sym.Expr) (int64, bool) {
	if e == nil || len(e.Terms) != 1 || e.Terms[0].Kind != x86sym.TP || e.Terms[0].Coef != 1 {
		return 0, false
	}
	return e.Const, true
}

// fitTSD finds the one TSDLayout under which every key's address is what
// pthread_getspecific read; addrs[k] is nil for the keys past the last.
func fitTSD(addrs []*x86sym.Expr) (profiler.TSDLayout, error) {
	fail := func(k int, why string) (profiler.TSDLayout, error) {
		return profiler.TSDLayout{}, fmt.Errorf("pthread_getspecific reads key %d at %v: %s", k, addrs[k], why)
	}
	// The first block: keys from 0 up, at base + first + k * entry.
	self, f0, ok := firstBlock(addrs[0])
	if !ok || addrs[1] == nil {
		return fail(0, "not a first block of key data")
	}
	s1, f1, ok := firstBlock(addrs[1])
	if !ok || s1 != self || f1 <= f0 {
		return fail(1, "not the next entry of the first block")
	}
	entry := f1 - f0
	block := 0
	for k := range maxKeys {
		a := addrs[k]
		if a == nil {
			break
		}
		s, f, ok := firstBlock(a)
		if !ok || s != self {
			break
		}
		if f != f0+int64(k)*entry {
			return fail(k, "not where the first block's entries lead")
		}
		block = k + 1
	}
	// Blocks hold a power of two of keys: the first as many as any.
	if block&(block-1) != 0 {
		return fail(block, fmt.Sprintf("a first block of %d keys, not a power of two", block))
	}
	shift := 0
	for 1<<shift < block {
		shift++
	}
	layout := profiler.TSDLayout{Self: profiler.PythonNoOffset, BlockShift: uint8(shift)}
	if self >= 0 {
		layout.Self = uint16(self)
	}
	// The second level: block pointers at second + (k >> shift) * 8,
	// data at (k & (block - 1)) * entry + data.
	var second, data int64 = -1, -1
	for k := block; k < maxKeys && addrs[k] != nil; k++ {
		p, off, ok := secondBlock(addrs[k])
		if !ok {
			return fail(k, "not a second-level block")
		}
		if second < 0 {
			second, data = p-int64(k>>shift)*8, off-int64(k&(block-1))*entry
		}
		if p != second+int64(k>>shift)*8 || off != int64(k&(block-1))*entry+data {
			return fail(k, "not where the second-level blocks lead")
		}
	}
	if data < 0 {
		// No second level: the data's offset in an entry is unknown,
		// and need not be.
		data = 0
		second = 0
	}
	first := f0 - data
	if first < 0 || first > 0xffff || second < 0 || second > 0xffff || entry <= 0 || entry > 0xff || data > 0xff {
		return profiler.TSDLayout{}, fmt.Errorf("pthread_getspecific's layout (first %d, second %d, entry %d, data %d) is out of the sampler's bounds", first, second, entry, data)
	}
	layout.First, layout.Second = uint16(first), uint16(second)
	layout.Entry, layout.Data = uint8(entry), uint8(data)
	return layout, nil
}

// DTV is where __tls_get_addr finds a module's TLS block: the DTV's
// address is at Offset from the thread pointer, module m's block address
// at m * Entry + Base in the DTV.
type DTV struct {
	Offset uint16
	Entry  uint64
	Base   int64
}

// EntryOf is the offset in the DTV of module m's block address.
func (d DTV) EntryOf(module uint64) uint64 { return module*d.Entry + uint64(d.Base) }

// DTVLayout returns where the __tls_get_addr of img, the dynamic loader,
// finds a TLS block: run on a symbolic tls_index {module, offset}, it must
// return the block of the DTV entry of the module plus the offset.
func DTVLayout(img *elfimage.Image) (DTV, error) {
	sym, code, err := img.Code("__tls_get_addr", maxCode)
	if err != nil {
		return DTV{}, fmt.Errorf("finding __tls_get_addr: %w", err)
	}
	m := x86sym.Machine{Code: code, Addr: sym.Value}
	res, err := m.Run()
	if err != nil {
		return DTV{}, fmt.Errorf("running __tls_get_addr: %w", err)
	}
	if res.Stop != x86sym.Returned || res.Return == nil {
		return DTV{}, fmt.Errorf("__tls_get_addr does not return on its fast path")
	}
	// [dtv + entry*[arg] + base] + [arg + 8]
	arg := x86sym.Single(x86sym.Arg, nil, 0)
	offsetLoad := x86sym.Single(x86sym.Load, x86sym.AddConst(arg, 8), 0)
	rest := x86sym.Add(res.Return, x86sym.Scale(offsetLoad, -1))
	_, block, others := rest.Split(x86sym.Load)
	if block == nil || block.Coef != 1 || len(others.Terms) != 0 || others.Const != 0 {
		return DTV{}, fmt.Errorf("__tls_get_addr returns %v: not a DTV block plus the offset", res.Return)
	}
	// The block's address: [tp + off] + entry*[arg] + base.
	moduleLoad := x86sym.Single(x86sym.Load, arg, 0)
	var entry int64
	var dtv *x86sym.Expr
	for _, t := range block.Addr.Terms {
		switch {
		case t.Kind == x86sym.Load && x86sym.Equal(t.Addr, moduleLoad.Terms[0].Addr):
			entry = t.Coef
		case t.Kind == x86sym.Load && t.Coef == 1:
			dtv = t.Addr
		default:
			return DTV{}, fmt.Errorf("__tls_get_addr reads the block at %v: not a DTV entry", block.Addr)
		}
	}
	off, ok := tpOffset(dtv)
	if !ok || entry <= 0 || off < 0 || off > 0xffff {
		return DTV{}, fmt.Errorf("__tls_get_addr reads the block at %v: not a DTV entry from the thread pointer", block.Addr)
	}
	return DTV{Offset: uint16(off), Entry: uint64(entry), Base: block.Addr.Const}, nil
}
