package kernelsym

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/bpfcol/bpfcol/internal/lru"
)

// maxUnresolved bounds the addresses remembered as unknown to the current
// snapshot, so the same stray address does not trigger a re-read per batch.
// Beyond it the least recently seen is forgotten, not all of them at once.
const maxUnresolved = 4096

// kallsymsSource is the fallback: a parsed /proc/kallsyms snapshot, read
// again only when it can have changed.
//
// Only modules and JIT-compiled BPF code (programs, trampolines) add or
// remove kernel symbols after boot. Before each batch the source compares a
// change signature, a hash of /proc/modules and of the IDs of all loaded BPF
// programs, with the one taken at the last read: a few reads and one
// BPF_PROG_GET_NEXT_ID per program instead of a 120k-line parse, and no
// timer. Walking program IDs needs CAP_SYS_ADMIN; without it a program load
// is noticed when an address no symbol covers shows up, and that triggers at
// most one re-read per batch.
type kallsymsSource struct {
	open func() (io.ReadCloser, error)
	// reads counts full parses, for tests of the change signature.
	reads int
	// changed computes the change signature: changeSignature, which a
	// test narrows to its own program.
	changed func() (sig uint64, sawAllBPF bool)

	syms       *kallsymsTable
	lastBPF    kallsymsSymbol // highest [bpf] symbol: kallsyms has no end for it
	signature  uint64
	sawAllBPF  bool // the signature covered BPF programs
	unresolved *lru.Cache[resultKey, struct{}]
}

func newKallsymsSource(open func() (io.ReadCloser, error)) *kallsymsSource {
	return &kallsymsSource{open: open, changed: changeSignature, unresolved: lru.New[resultKey, struct{}](maxUnresolved, nil)}
}

func (k *kallsymsSource) lookup(addrs []uint64, isReturn []bool, out []Symbol) error {
	sig, sawAllBPF := k.changed()
	reread := false
	if k.syms == nil || sig != k.signature {
		if err := k.read(sig, sawAllBPF); err != nil {
			return err
		}
		reread = true
	}
	unknown := k.resolve(addrs, isReturn, out)
	if unknown == 0 || k.sawAllBPF || reread {
		k.remember(addrs, isReturn, out)
		return nil
	}
	// A BPF program may have loaded unseen: read again, once.
	if err := k.read(sig, sawAllBPF); err != nil {
		return err
	}
	k.resolve(addrs, isReturn, out)
	k.remember(addrs, isReturn, out)
	return nil
}

// resolve fills out and returns how many addresses are unknown to the
// snapshot and not already remembered as unknown to it.
func (k *kallsymsSource) resolve(addrs []uint64, isReturn []bool, out []Symbol) int {
	unknown := 0
	for i, a := range addrs {
		out[i] = k.lookupOne(a, isReturn[i])
		if !out[i].OK {
			if _, seen := k.unresolved.Get(resultKey{a, isReturn[i]}); !seen {
				unknown++
			}
		}
	}
	return unknown
}

func (k *kallsymsSource) remember(addrs []uint64, isReturn []bool, out []Symbol) {
	for i := range out {
		if out[i].OK {
			continue
		}
		k.unresolved.Add(resultKey{addrs[i], isReturn[i]}, struct{}{})
	}
}

func (k *kallsymsSource) lookupOne(addr uint64, isReturn bool) Symbol {
	looked := addr
	if isReturn {
		looked--
	}
	ks, off, ok := k.syms.Lookup(looked)
	if !ok {
		// Past the last JIT image kallsyms gives no end. Images are packed
		// into 2 MiB-aligned bpf_prog_pack chunks holding nothing but
		// listed images, so an address after the last one in its chunk is
		// inside it; its size stays unknown.
		const packShift = 21
		b := k.lastBPF
		if b.Name == "" || looked < b.Addr || looked>>packShift != b.Addr>>packShift {
			return Symbol{}
		}
		ks, off = b, looked-b.Addr
	}
	if isReturn {
		off++
	}
	s := Symbol{Name: ks.Name, Offset: off, Size: ks.Size, Module: ks.Module, OK: true}
	// The kernel prints JIT-compiled code without a module; kallsyms lists
	// it under the pseudo module [bpf].
	if s.Module == "bpf" {
		s.Module = ""
		s.IsBPFProg = isBPFProgName([]byte(s.Name))
	}
	return s
}

func (k *kallsymsSource) read(sig uint64, sawAllBPF bool) error {
	f, err := k.open()
	if err != nil {
		return fmt.Errorf("opening kallsyms: %w", err)
	}
	defer f.Close()
	text, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("reading kallsyms: %w", err)
	}
	syms, err := loadKallsyms(bytes.NewReader(text))
	if err != nil {
		return fmt.Errorf("reading kallsyms: %w", err)
	}
	k.syms, k.lastBPF, k.signature, k.sawAllBPF = syms, lastBPFSymbol(text), sig, sawAllBPF
	k.unresolved.Purge()
	k.reads++
	return nil
}

// lastBPFSymbol returns the [bpf] line with the highest address, if any.
func lastBPFSymbol(text []byte) kallsymsSymbol {
	var last kallsymsSymbol
	const suffix = "\t[bpf]"
	for rest := text; ; {
		i := bytes.Index(rest, []byte(suffix))
		if i < 0 {
			return last
		}
		line := rest[:i]
		rest = rest[i+len(suffix):]
		if j := bytes.LastIndexByte(line, '\n'); j >= 0 {
			line = line[j+1:]
		}
		// "ffffffffc0001000 t bpf_prog_<tag>_<name>"
		fields := bytes.Fields(line)
		if len(fields) != 3 {
			continue
		}
		addr, err := strconv.ParseUint(string(fields[0]), 16, 64)
		if err != nil || addr < last.Addr {
			continue
		}
		last = kallsymsSymbol{Addr: addr, Name: string(fields[2]), Module: "bpf"}
	}
}

// changeSignature hashes what adds or removes kernel symbols after boot:
// /proc/modules (absent without CONFIG_MODULES) and the loaded BPF program
// IDs, which the kernel never reuses while an ID is live and allocates
// cyclically. sawAllBPF is false when the IDs could not be listed.
func changeSignature() (sig uint64, sawAllBPF bool) {
	return signatureOf(nil)
}

// signatureOf is changeSignature over the programs keep accepts (all when
// keep is nil).
func signatureOf(keep func(ebpf.ProgramID) bool) (sig uint64, sawAllBPF bool) {
	h := fnv.New64a()
	if modules, err := os.ReadFile("/proc/modules"); err == nil {
		h.Write(modules)
	}
	h.Write([]byte{0})
	sawAllBPF = true
	var id ebpf.ProgramID
	var b [4]byte
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			sawAllBPF = false
			break
		}
		id = next
		if keep != nil && !keep(id) {
			continue
		}
		b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		h.Write(b[:])
	}
	return h.Sum64(), sawAllBPF
}
