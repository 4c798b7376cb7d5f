package hotspot

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"unsafe"

	"github.com/bpfcol/bpfcol/internal/frame"
)

// maxDebugInfo bounds the debug information read of one nmethod (its
// metadata, scopes and PC descriptors): C2's largest methods hold a few
// hundred KiB.
const maxDebugInfo = 1 << 20

// Blob names HotSpot gives compiled methods.
const (
	nmethodName       = "nmethod"
	nativeNMethodName = "native nmethod"
)

// pcDesc maps the end of an instruction range to its innermost scope.
type pcDesc struct {
	pc    int32
	scope uint32
}

// nmethod is a compiled method with what names its frames: at each PC,
// the chain of methods inlined there.
type nmethod struct {
	compileID uint32
	own       *method // the method compiled
	// pcs are its PC descriptors, by PC; scopes its scopes data; methods
	// the methods its scopes name, by metadata index (nil: unreadable).
	pcs      []pcDesc
	scopes   []byte
	methods  map[uint32]*method
	excluded uint8
}

func (n *nmethod) bytes() int64 {
	b := int64(unsafe.Sizeof(*n)) + int64(len(n.pcs))*int64(unsafe.Sizeof(pcDesc{})) + int64(len(n.scopes))
	seen := map[*method]bool{n.own: true}
	b += n.own.bytes()
	for _, m := range n.methods {
		b += 48
		if m != nil && !seen[m] {
			seen[m] = true
			b += m.bytes()
		}
	}
	return b
}

// Lines names the instruction at offset in the nmethod's code (a return
// address less one): the methods inlined there, innermost first, the
// compiled method last. Like HotSpot's own samplers, it takes the scopes
// of the first PC descriptor after offset: debug information is recorded
// where the code can stop (calls, safepoint polls), for the code leading
// there.
func (n *nmethod) Lines(offset uint32) []frame.Line {
	own := func(line int64) []frame.Line {
		return []frame.Line{{Name: n.own.name, File: n.own.file, Line: line}}
	}
	if offset == frame.NoOffset || len(n.pcs) == 0 {
		return own(0)
	}
	i := sort.Search(len(n.pcs), func(i int) bool { return int64(n.pcs[i].pc) > int64(offset) })
	if i == len(n.pcs) || n.pcs[i].scope == 0 {
		return own(0)
	}
	chain, err := decodeScopes(n.scopes, n.pcs[i].scope, n.excluded, nil)
	if err != nil || len(chain) == 0 {
		return own(0)
	}
	lines := make([]frame.Line, 0, len(chain))
	for _, s := range chain {
		m := n.methods[s.method]
		if m == nil {
			lines = append(lines, frame.Line{Name: unknownMethod})
			continue
		}
		lines = append(lines, frame.Line{Name: m.name, File: m.file, Line: m.line(s.bci)})
	}
	return lines
}

// unknownMethod names an inlined method that could not be read.
const unknownMethod = "[unknown]"

// errNotNMethod is returned for a code blob that is no compiled method of
// the identity the sampler saw (recompiled, or freed and reused).
var errNotNMethod = errors.New("not the compiled method sampled")

// nmethod reads the compiled method at addr, whose compile id's low 16
// bits are check, with the methods its debug information names.
func (r *reader) nmethod(addr uint64, check uint16, native bool, methods func(uint64) *method) (*nmethod, error) {
	l := r.l
	h, err := r.read(addr, l.nmSize)
	if err != nil {
		return nil, fmt.Errorf("reading nmethod: %w", err)
	}
	n := &nmethod{compileID: u32(h, l.nmCompileID), excluded: l.unsigned5Excluded}
	if uint16(n.compileID) != check {
		return nil, errNotNMethod
	}
	if n.own = methods(u64(h, l.nmMethod)); n.own == nil {
		return nil, fmt.Errorf("nmethod %d: its method is unreadable", n.compileID)
	}
	if native {
		// A native method's wrapper has no scopes: the method is all.
		return n, nil
	}
	// Its debug information lies in the blob, in this order: metadata
	// (Method* and Klass*), scopes data, PC descriptors.
	meta := uint64(u32(h, l.nmMetadata))
	scopes := u64(h, l.nmScopesDataBegin) - addr
	pcs := uint64(u32(h, l.nmScopesPcs))
	end := uint64(u32(h, l.nmDependencies))
	if !(meta <= scopes && scopes <= pcs && pcs <= end) || end-meta > maxDebugInfo || meta < l.nmSize {
		return nil, fmt.Errorf("nmethod %d: debug information at %d, %d, %d, %d: out of order or too large",
			n.compileID, meta, scopes, pcs, end)
	}
	data, err := r.read(addr+meta, end-meta)
	if err != nil {
		return nil, fmt.Errorf("reading nmethod %d's debug information: %w", n.compileID, err)
	}
	metadata := data[:scopes-meta]
	n.scopes = slices.Clone(data[scopes-meta : pcs-meta])
	pcData := data[pcs-meta:]
	for off := uint64(0); off+l.pcDescSize <= uint64(len(pcData)); off += l.pcDescSize {
		n.pcs = append(n.pcs, pcDesc{pc: int32(u32(pcData, off+l.pcDescPC)), scope: u32(pcData, off+l.pcDescScope)})
	}
	if !slices.IsSortedFunc(n.pcs, func(a, b pcDesc) int { return int(a.pc) - int(b.pc) }) {
		return nil, fmt.Errorf("nmethod %d: PC descriptors out of order", n.compileID)
	}
	// The methods every scope names, read now: the process may be gone
	// when its frames are named.
	n.methods = map[uint32]*method{}
	var chain []scope
	decodes := 0
	for _, p := range n.pcs {
		if p.scope == 0 {
			continue
		}
		if decodes > maxDecodes {
			break
		}
		chain, _ = decodeScopes(n.scopes, p.scope, n.excluded, chain[:0])
		for _, s := range chain {
			decodes++
			if _, ok := n.methods[s.method]; ok {
				continue
			}
			var m *method
			if s.method > 0 && uint64(s.method)*8 <= uint64(len(metadata)) {
				m = methods(u64(metadata, uint64(s.method-1)*8))
			}
			n.methods[s.method] = m
		}
	}
	return n, nil
}
