//go:build linux && (amd64 || arm64)

package profiler

import (
	"encoding/binary"
	"unsafe"
)

// A packed record's layout: its head is the fields before the kernel
// stack, its flags among them.
var (
	packedHead = int(unsafe.Offsetof(profilerSample{}.Kernel))
	flagsAt    = int(unsafe.Offsetof(profilerSample{}.Flags))
	stackWords = len(profilerSample{}.Kernel)
	packedFlag = uint32(profilerSampleFlagSAMPLE_PACKED)
)

// packed reports whether raw is a packed record (SAMPLE_PACKED): an
// interpreter process's sample, its stacks and frames sent as far as
// filled.
func packed(raw []byte) bool {
	return len(raw) >= packedHead && binary.LittleEndian.Uint32(raw[flagsAt:])&packedFlag != 0
}

// unpacker lays a packed record out as a whole one.
type unpacker struct {
	rec profilerSample
}

// of returns packed record raw as a whole record, valid until the next
// call, and its interpreter tail. Lengths come from the kernel's record
// and are checked against it all the same: a stack the record does not
// hold reads as an error (-EFAULT), never beyond it.
func (u *unpacker) of(raw []byte) (*profilerSample, []byte) {
	r := &u.rec
	copy(unsafe.Slice((*byte)(unsafe.Pointer(r)), packedHead), raw)
	at := packedHead
	take := func(filled *int32, dst []uint64) {
		if *filled <= 0 {
			return
		}
		n := int(*filled) / 8
		if n > stackWords || at+n*8 > len(raw) {
			*filled = -14 // EFAULT
			return
		}
		for i := range n {
			dst[i] = binary.LittleEndian.Uint64(raw[at+i*8:])
		}
		*filled = int32(n * 8)
		at += n * 8
	}
	take(&r.KernelBytes, r.Kernel[:])
	take(&r.UserBytes, r.User[:])
	return r, raw[at:]
}
