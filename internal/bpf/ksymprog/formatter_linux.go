//go:build linux && (amd64 || arm64)

package ksymprog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/bpf/support"
)

const (
	requestSize = int(unsafe.Sizeof(ksymKsymRequest{}))
	textSize    = int(unsafe.Sizeof(ksymKsymText{}))
	textOffset  = int(unsafe.Offsetof(ksymKsymText{}.Text))
	textLen     = textSize - textOffset
)

// Formatter is the loaded formatter program and its two mmapped arrays.
// It is not safe for concurrent use.
type Formatter struct {
	objs     ksymObjects
	requests *ebpf.Memory
	texts    *ebpf.Memory
	staging  []byte // one batch of requests, copied into requests at once; grows to MaxBatch
	slot     [textSize]byte
}

// Load checks support, then loads the formatter. The error names the missing
// capability or kernel feature, or carries the verifier's refusal.
func Load() (_ *Formatter, err error) {
	if err := CheckSupport(); err != nil {
		return nil, err
	}
	spec, err := loadKsym()
	if err != nil {
		return nil, fmt.Errorf("loading kernel symbol formatter spec: %w", err)
	}
	f := &Formatter{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := spec.LoadAndAssign(&f.objs, &ebpf.CollectionOptions{Cache: support.KernelTypes()}); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loading kernel symbol formatter: %w", verr)
		}
		return nil, fmt.Errorf("loading kernel symbol formatter: %w", err)
	}
	if f.requests, err = f.objs.Requests.Memory(); err != nil {
		return nil, fmt.Errorf("mapping request array: %w", err)
	}
	if f.texts, err = f.objs.Texts.Memory(); err != nil {
		return nil, fmt.Errorf("mapping text array: %w", err)
	}
	return f, nil
}

// Format prints every addrs[i] the way the kernel's printk does: %pB (look
// up addr-1, for a return address) when isReturn[i], else %pS. It calls
// visit with each result in order; text is valid only during the call and
// truncated tells that the kernel's text did not fit (it lacks its end).
// Requests over MaxBatch run in several batches.
func (f *Formatter) Format(addrs []uint64, isReturn []bool, visit func(i int, text []byte, truncated bool)) error {
	if len(isReturn) != len(addrs) {
		return fmt.Errorf("formatting kernel addresses: %d return flags for %d addresses", len(isReturn), len(addrs))
	}
	for start := 0; start < len(addrs); start += MaxBatch {
		end := min(start+MaxBatch, len(addrs))
		if err := f.formatBatch(start, addrs[start:end], isReturn[start:end], visit); err != nil {
			return err
		}
	}
	return nil
}

func (f *Formatter) formatBatch(base int, addrs []uint64, isReturn []bool, visit func(int, []byte, bool)) error {
	if need := len(addrs) * requestSize; cap(f.staging) < need {
		f.staging = make([]byte, need)
	}
	buf := f.staging[:len(addrs)*requestSize]
	for i, a := range addrs {
		r := buf[i*requestSize : (i+1)*requestSize]
		binary.NativeEndian.PutUint64(r[0:8], a)
		var flags uint32
		if isReturn[i] {
			flags = requestReturn
		}
		binary.NativeEndian.PutUint32(r[8:12], flags)
		binary.NativeEndian.PutUint32(r[12:16], 0)
	}
	if len(buf) > 0 {
		if _, err := f.requests.WriteAt(buf, 0); err != nil {
			return fmt.Errorf("writing kernel address requests: %w", err)
		}
	}
	n, err := f.objs.FormatAddrs.Run(&ebpf.RunOptions{Context: ksymKsymArgs{Count: uint32(len(addrs))}})
	if err != nil {
		return fmt.Errorf("running kernel symbol formatter: %w", err)
	}
	if int(n) != len(addrs) {
		return fmt.Errorf("running kernel symbol formatter: formatted %d of %d addresses", n, len(addrs))
	}
	for i := range addrs {
		if _, err := f.texts.ReadAt(f.slot[:], int64(i*textSize)); err != nil {
			return fmt.Errorf("reading formatted kernel address: %w", err)
		}
		l := int32(binary.NativeEndian.Uint32(f.slot[0:4]))
		if l < 0 {
			return fmt.Errorf("formatting kernel address %#x: bpf_snprintf errno %d", addrs[i], -l)
		}
		// l counts the NUL.
		truncated := int(l) > textLen
		tl := min(max(int(l)-1, 0), textLen-1)
		visit(base+i, f.slot[textOffset:textOffset+tl], truncated)
	}
	return nil
}

// TextBounds returns the core kernel text's bounds, _stext and _etext,
// as kallsyms knows them: both zero where it hides addresses.
func (f *Formatter) TextBounds() (stext, etext uint64, err error) {
	ret, err := f.objs.TextBounds.Run(&ebpf.RunOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("looking up the kernel text's bounds: %w", err)
	}
	if ret != 0 {
		return 0, 0, fmt.Errorf("looking up the kernel text's bounds: %w", syscall.Errno(-int32(ret)))
	}
	var b ksymKsymBounds
	if err := f.objs.Bounds.Get(&b); err != nil {
		return 0, 0, fmt.Errorf("reading the kernel text's bounds: %w", err)
	}
	return b.Stext, b.Etext, nil
}

// Close unloads the program and unmaps the arrays. The mappings go away
// with the maps' last reference.
func (f *Formatter) Close() error {
	f.requests, f.texts = nil, nil
	return f.objs.Close()
}
