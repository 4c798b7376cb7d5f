package cfi

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// arch is what compiling a file's CFI needs to know of its architecture.
type arch struct {
	// DWARF numbers of the stack pointer and the frame pointer.
	sp, fp uint64
	// raInLink: a function starts with its return address in a register
	// (arm64's x30, the CIE's return address column), where a leaf may
	// keep it; x86-64's call pushed it at CFA-8.
	raInLink bool
	// raSigned: DW_CFA_AARCH64_negate_ra_state marks return addresses
	// signed with pointer authentication; the walk strips the signature.
	raSigned bool
}

var (
	archX86_64 = &arch{sp: 7, fp: 6}
	archARM64  = &arch{sp: 31, fp: 29, raInLink: true, raSigned: true}
)

// archOf returns the architecture of f, or an error naming it when the
// unwinder does not walk it.
func archOf(f *elf.File) (*arch, error) {
	if f.Class == elf.ELFCLASS64 && f.ByteOrder == binary.LittleEndian {
		switch f.Machine {
		case elf.EM_X86_64:
			return archX86_64, nil
		case elf.EM_AARCH64:
			return archARM64, nil
		}
	}
	return nil, fmt.Errorf("compiling CFI of a %v %v file: only x86-64 and arm64 are supported", f.Class, f.Machine)
}
