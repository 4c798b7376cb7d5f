package hotspot

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp"
)

// layout is what bpfcol reads of one libjvm build: the offsets of the
// fields it follows, the sizes of the structures, and the file-relative
// addresses of the static fields. Every value comes from the build's own
// vmStructs; those that are not there are known per version range below,
// and a version outside it is refused.
type layout struct {
	version int // the JDK's major version

	// Statics, as virtual addresses of the file (add the load bias).
	codeCacheHeaps, codeCacheLow, codeCacheHigh uint64
	interpreterCode                             uint64 // AbstractInterpreter::_code (StubQueue*)
	callStubReturn                              uint64 // StubRoutines::_call_stub_return_address

	// GrowableArray<CodeHeap*>.
	arrayLen, arrayData uint64
	// CodeHeap and its VirtualSpaces.
	heapMemory, heapSegmap, heapLog2Segment uint64
	vsLowBoundary, vsHighBoundary           uint64
	// StubQueue.
	queueBuffer, queueLimit uint64
	// HeapBlock.
	blockHeader, blockUsed uint64

	// CodeBlob, CompiledMethod and nmethod fields.
	blobName, blobFrameComplete, blobFrameSize, blobCodeBegin, blobCodeEnd uint64
	nmMethod, nmScopesDataBegin, nmDeoptHandler                            uint64
	nmCompileID, nmOrigPC, nmScopesPcs, nmDependencies, nmMetadata         uint64
	nmEntryBCI                                                             uint64
	nmSize                                                                 uint64
	pcDescSize, pcDescPC, pcDescScope                                      uint64

	// Method, ConstMethod, ConstantPool, InstanceKlass, Symbol.
	methodConst                                                     uint64
	constSize, constConstants, constCodeSize, constFlags, constName uint64
	constSignature, constIDNum                                      uint64
	hasLineTable                                                    uint64
	poolSize, poolHolder, poolSourceFile, poolLength                uint64
	klassName, klassMethods                                         uint64
	symbolLength, symbolBody                                        uint64
	methodArrayLen, methodArrayData                                 uint64

	// Interpreter frame slots, in words from the frame pointer.
	fpMethod, fpBCP, fpSenderSP int8

	// unsigned5Excluded is how many byte values UNSIGNED5 streams leave
	// out (JDK 21 and later: the zero byte).
	unsigned5Excluded uint8
}

// Versions whose layout bpfcol knows. In JDK 9 to 22 a compiled method
// keeps its debug information in its own blob and its code boundaries as
// pointers; JDK 23 moved them out. JDK 20 changed the encoding of its
// debug information in an update, which its major version does not tell.
const (
	minVersion = 9
	maxVersion = 22
)

// errNoFields wraps the list of fields a build lacks.
var errNoFields = errors.New("fields missing from vmStructs")

// readLayout takes what bpfcol needs out of the tables of a build whose
// load bias is bias. A build it cannot follow gives an error wrapping
// interp.ErrUnsupported.
func readLayout(vs *VMStructs, mem memory, bias uint64) (*layout, error) {
	var missing []string
	field := func(name string) uint64 {
		f, ok := vs.Fields[name]
		if !ok || f.Static {
			missing = append(missing, name)
			return 0
		}
		return f.Offset
	}
	static := func(name string) uint64 {
		f, ok := vs.Fields[name]
		if !ok || !f.Static || f.Address < bias {
			missing = append(missing, name)
			return 0
		}
		return f.Address - bias
	}
	size := func(name string) uint64 {
		s, ok := vs.Sizes[name]
		if !ok {
			missing = append(missing, name)
		}
		return s
	}
	constant := func(name string) int64 {
		v, ok := vs.Ints[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	}
	either := func(names ...string) uint64 {
		for _, n := range names {
			if f, ok := vs.Fields[n]; ok && !f.Static {
				return f.Offset
			}
		}
		missing = append(missing, strings.Join(names, " or "))
		return 0
	}

	versionAddr := static("Abstract_VM_Version::_vm_major_version")
	l := &layout{
		codeCacheHeaps:  static("CodeCache::_heaps"),
		codeCacheLow:    static("CodeCache::_low_bound"),
		codeCacheHigh:   static("CodeCache::_high_bound"),
		interpreterCode: static("AbstractInterpreter::_code"),
		callStubReturn:  static("StubRoutines::_call_stub_return_address"),

		arrayLen:  either("GrowableArrayBase::_len", "GenericGrowableArray::_len"),
		arrayData: field("GrowableArray<int>::_data"),

		heapMemory:      field("CodeHeap::_memory"),
		heapSegmap:      field("CodeHeap::_segmap"),
		heapLog2Segment: field("CodeHeap::_log2_segment_size"),
		vsLowBoundary:   field("VirtualSpace::_low_boundary"),
		vsHighBoundary:  field("VirtualSpace::_high_boundary"),
		queueBuffer:     field("StubQueue::_stub_buffer"),
		queueLimit:      field("StubQueue::_buffer_limit"),
		blockHeader:     size("HeapBlock"),
		blockUsed:       field("HeapBlock::_header") + field("HeapBlock::Header::_used"),

		blobName:          field("CodeBlob::_name"),
		blobFrameComplete: field("CodeBlob::_frame_complete_offset"),
		blobFrameSize:     field("CodeBlob::_frame_size"),
		blobCodeBegin:     field("CodeBlob::_code_begin"),
		blobCodeEnd:       field("CodeBlob::_code_end"),
		nmMethod:          field("CompiledMethod::_method"),
		nmScopesDataBegin: field("CompiledMethod::_scopes_data_begin"),
		nmDeoptHandler:    field("CompiledMethod::_deopt_handler_begin"),
		nmCompileID:       field("nmethod::_compile_id"),
		nmOrigPC:          field("nmethod::_orig_pc_offset"),
		nmScopesPcs:       field("nmethod::_scopes_pcs_offset"),
		nmDependencies:    field("nmethod::_dependencies_offset"),
		nmMetadata:        field("nmethod::_metadata_offset"),
		nmEntryBCI:        field("nmethod::_entry_bci"),
		nmSize:            size("nmethod"),
		pcDescSize:        size("PcDesc"),
		pcDescPC:          field("PcDesc::_pc_offset"),
		pcDescScope:       field("PcDesc::_scope_decode_offset"),

		methodConst:     field("Method::_constMethod"),
		constSize:       size("ConstMethod"),
		constConstants:  field("ConstMethod::_constants"),
		constCodeSize:   field("ConstMethod::_code_size"),
		constFlags:      field("ConstMethod::_flags"),
		constName:       field("ConstMethod::_name_index"),
		constSignature:  field("ConstMethod::_signature_index"),
		constIDNum:      field("ConstMethod::_method_idnum"),
		hasLineTable:    uint64(constant("ConstMethod::_has_linenumber_table")),
		poolSize:        size("ConstantPool"),
		poolHolder:      field("ConstantPool::_pool_holder"),
		poolSourceFile:  field("ConstantPool::_source_file_name_index"),
		poolLength:      field("ConstantPool::_length"),
		klassName:       field("Klass::_name"),
		klassMethods:    field("InstanceKlass::_methods"),
		symbolLength:    field("Symbol::_length"),
		symbolBody:      field("Symbol::_body"),
		methodArrayLen:  field("Array<Klass*>::_length"),
		methodArrayData: field("Array<Method*>::_data"),
	}
	senderSP := constant("frame::interpreter_frame_sender_sp_offset")
	lastSP := constant("frame::interpreter_frame_last_sp_offset")
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %w: %s", interp.ErrUnsupported, errNoFields, strings.Join(missing, ", "))
	}
	v, err := readInt32(mem, versionAddr+bias)
	if err != nil {
		return nil, fmt.Errorf("reading the JVM's version: %w", err)
	}
	l.version = int(v)
	if l.version < minVersion || l.version > maxVersion || l.version == 20 {
		return nil, fmt.Errorf("%w: JDK %d (known: %d to %d, but 20)", interp.ErrUnsupported, l.version, minVersion, maxVersion)
	}
	if l.version >= 21 {
		l.unsigned5Excluded = 1
	}
	// Below the sender's SP and the last SP of a call (both in
	// vmStructs), x86-64's template interpreter keeps the Method*, its
	// mirror, the MDP, the constant pool cache, the locals and the
	// bytecode pointer (frame_x86.hpp, JDK 9 to 22).
	if senderSP != -1 || lastSP != -2 {
		return nil, fmt.Errorf("%w: interpreter frame with sender SP at %d and last SP at %d (known: -1, -2)",
			interp.ErrUnsupported, senderSP, lastSP)
	}
	l.fpSenderSP, l.fpMethod, l.fpBCP = int8(senderSP), int8(lastSP-1), int8(lastSP-6)
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", interp.ErrUnsupported, err)
	}
	return l, nil
}

// Bounds on the structures bpfcol reads: whatever a build's tables say,
// no read of one allocates more.
const (
	maxStructBytes = 4096
	maxFieldOffset = maxStructBytes - 8
)

// check refuses sizes and offsets beyond any real build's.
func (l *layout) check() error {
	for _, s := range []struct {
		name string
		v    uint64
	}{{"nmethod", l.nmSize}, {"ConstMethod", l.constSize}, {"ConstantPool", l.poolSize}, {"HeapBlock", l.blockHeader}, {"PcDesc", l.pcDescSize}} {
		if s.v == 0 || s.v > maxStructBytes {
			return fmt.Errorf("sizeof(%s) = %d: outside [1, %d]", s.name, s.v, maxStructBytes)
		}
	}
	for _, f := range []struct {
		name string
		off  uint64
		size uint64
	}{
		{"nmethod::_compile_id", l.nmCompileID, l.nmSize},
		{"nmethod::_orig_pc_offset", l.nmOrigPC, l.nmSize},
		{"nmethod::_scopes_pcs_offset", l.nmScopesPcs, l.nmSize},
		{"nmethod::_dependencies_offset", l.nmDependencies, l.nmSize},
		{"nmethod::_metadata_offset", l.nmMetadata, l.nmSize},
		{"nmethod::_entry_bci", l.nmEntryBCI, l.nmSize},
		{"CompiledMethod::_method", l.nmMethod, l.nmSize},
		{"CompiledMethod::_scopes_data_begin", l.nmScopesDataBegin, l.nmSize},
		{"CompiledMethod::_deopt_handler_begin", l.nmDeoptHandler, l.nmSize},
		{"CodeBlob::_name", l.blobName, l.nmSize},
		{"CodeBlob::_code_begin", l.blobCodeBegin, l.nmSize},
		{"CodeBlob::_code_end", l.blobCodeEnd, l.nmSize},
		{"CodeBlob::_frame_size", l.blobFrameSize, l.nmSize},
		{"CodeBlob::_frame_complete_offset", l.blobFrameComplete, l.nmSize},
		{"PcDesc::_pc_offset", l.pcDescPC, l.pcDescSize},
		{"PcDesc::_scope_decode_offset", l.pcDescScope, l.pcDescSize},
		{"ConstMethod::_constants", l.constConstants, l.constSize},
		{"ConstMethod::_code_size", l.constCodeSize, l.constSize},
		{"ConstMethod::_flags", l.constFlags, l.constSize},
		{"ConstMethod::_name_index", l.constName, l.constSize},
		{"ConstMethod::_signature_index", l.constSignature, l.constSize},
		{"ConstMethod::_method_idnum", l.constIDNum, l.constSize},
		{"ConstantPool::_pool_holder", l.poolHolder, l.poolSize},
		{"ConstantPool::_source_file_name_index", l.poolSourceFile, l.poolSize},
		{"ConstantPool::_length", l.poolLength, l.poolSize},
	} {
		if f.off >= f.size {
			return fmt.Errorf("%s at %d: beyond the structure's %d bytes", f.name, f.off, f.size)
		}
	}
	for _, f := range []struct {
		name string
		off  uint64
	}{
		{"HeapBlock::_used", l.blockUsed}, {"CodeHeap::_memory", l.heapMemory}, {"CodeHeap::_segmap", l.heapSegmap},
		{"CodeHeap::_log2_segment_size", l.heapLog2Segment}, {"VirtualSpace::_low_boundary", l.vsLowBoundary},
		{"VirtualSpace::_high_boundary", l.vsHighBoundary}, {"StubQueue::_stub_buffer", l.queueBuffer},
		{"StubQueue::_buffer_limit", l.queueLimit}, {"GrowableArray::_len", l.arrayLen}, {"GrowableArray::_data", l.arrayData},
		{"Method::_constMethod", l.methodConst}, {"Klass::_name", l.klassName}, {"InstanceKlass::_methods", l.klassMethods},
		{"Symbol::_length", l.symbolLength}, {"Symbol::_body", l.symbolBody},
		{"Array::_length", l.methodArrayLen}, {"Array<Method*>::_data", l.methodArrayData},
	} {
		if f.off > maxFieldOffset {
			return fmt.Errorf("%s at %d: beyond %d", f.name, f.off, maxFieldOffset)
		}
	}
	if l.blockUsed >= l.blockHeader {
		return fmt.Errorf("HeapBlock::_used at %d: beyond its %d bytes", l.blockUsed, l.blockHeader)
	}
	if l.hasLineTable == 0 || l.hasLineTable&(l.hasLineTable-1) != 0 {
		return fmt.Errorf("ConstMethod::_has_linenumber_table = %#x: not one flag", l.hasLineTable)
	}
	// The walk reads a blob's fields, its HeapBlock header first, in one
	// read of at most profiler.HotSpotBlockBytes.
	if l.blockHeader+l.walkBlobBytes() > profiler.HotSpotBlockBytes {
		return fmt.Errorf("a code blob's fields span %d bytes: more than the %d the walk reads", l.blockHeader+l.walkBlobBytes(), profiler.HotSpotBlockBytes)
	}
	return nil
}

// walkBlobBytes is how much of a code blob the BPF walk reads: up to the
// end of the furthest field it uses.
func (l *layout) walkBlobBytes() uint64 {
	end := uint64(0)
	for _, f := range []struct{ off, size uint64 }{
		{l.blobName, 8}, {l.blobFrameComplete, 4}, {l.blobFrameSize, 4}, {l.blobCodeBegin, 8},
		{l.nmCompileID, 4}, {l.nmOrigPC, 4}, {l.nmDeoptHandler, 8},
	} {
		end = max(end, f.off+f.size)
	}
	return end
}

func readInt32(mem memory, addr uint64) (int32, error) {
	var b [4]byte
	if err := mem.Read(addr, b[:]); err != nil {
		return 0, err
	}
	return int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24), nil
}
