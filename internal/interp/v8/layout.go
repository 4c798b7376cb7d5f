package v8

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
)

// Version is a V8 version.
type Version struct{ Major, Minor, Build int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Build) }

// atLeast reports whether v is at least major.minor.build.
func (v Version) atLeast(major, minor, build int) bool {
	if v.Major != major {
		return v.Major > major
	}
	if v.Minor != minor {
		return v.Minor > minor
	}
	return v.Build >= build
}

// ErrUnsupportedVersion is wrapped by the error of a V8 whose layout
// bpfcol cannot complete: its post-mortem data lacks a fact that no gap
// below fills for its version.
var ErrUnsupportedVersion = errors.New("V8 version not supported")

// layout is where one V8 build keeps what bpfcol reads: its post-mortem
// data (the v8dbg_* symbols its build exports), and the few facts that
// data lacks, filled by version (fillGaps). Offsets are in bytes from an
// object's untagged address unless said otherwise.
type layout struct {
	version Version

	// Bytes below a frame pointer of a frame's context (or marker), its
	// JSFunction, an interpreted frame's BytecodeArray and its bytecode
	// offset.
	fpContext, fpFunction, fpBytecodeArray, fpBytecodeOffset uint64

	// Instance types.
	firstNonString                                     uint16
	typeSFI, typeScopeInfo, typeScript                 uint16
	typeBytecodeArray, typeByteArray                   uint16
	typeCode, typeInstructionStream                    uint16
	typeFixedArray, typeWeakFixedArray                 uint16
	typeInterpreterData                                uint16
	strReprMask, strEncodingMask, strOneByte           uint16
	strSeq, strCons, strExternal, strSliced, strThin   uint16
	heapMap, mapInstanceType                           uint64
	strLength, seqChars, consFirst, consSecond         uint64
	thinActual, slicedParent, slicedOffset             uint64
	externalResource, externalData                     uint64
	fixedLength, fixedData                             uint64
	functionShared                                     uint64
	sfiFunctionData, sfiNameOrScopeInfo, sfiScript     uint64
	scriptName, scriptSource, scriptLineEnds           uint64
	bytecodeData, bytecodeSourcePositions              uint64
	interpreterDataBytecode                            uint64
	codeDeopt, codeSourcePositions, codeBytecodeOffset uint64
	codeBytecodeArray                                  uint64
	codeInstructionStream, codeInstructionStart        uint64
	codeFlags, codeInstructionSize                     uint64
	codeKindMask, codeKindShift                        uint32
	codeKindBaseline, codeKindInterpreted              uint32
	istreamCode, istreamHeader                         uint64

	// ScopeInfo: slot indexes from its first field, and its flags' bits.
	scopeContextLocals, scopeFirstVars      uint64
	scopeMaxInlinedLocals                   uint64
	scopeFunctionVarShift, scopeInferredBit uint32
	scopeSavedClassBit                      uint32
	scopeFunctionVarMask                    uint32

	// DeoptimizationData element indexes, and the InliningPosition
	// records of its inlining positions.
	deoptInlinedCount, deoptLiterals, deoptSFI, deoptInlining uint64
	inliningSize, inliningFunction                            uint64

	// bytecodeSizes is kBytecodeSizes: for each operand scale (1, 2,
	// 4), each bytecode's length; nil when the binary does not have it
	// (baseline frames then get their function's first line).
	bytecodeSizes [3][]byte
}

// symbols reads v8dbg_* values by their names after the prefix.
type symbols interface {
	// value returns the 32-bit value of v8dbg_<name>, false when the
	// binary has no such symbol.
	value(name string) (int64, bool)
}

// builder fills a layout from symbols, collecting what is missing.
type builder struct {
	syms    symbols
	missing []string
}

// get returns the first of names that the binary has.
func (b *builder) get(names ...string) int64 {
	for _, n := range names {
		if v, ok := b.syms.value(n); ok {
			return v
		}
	}
	b.missing = append(b.missing, names[0])
	return 0
}

func (b *builder) u64(names ...string) uint64 { return uint64(b.get(names...)) }
func (b *builder) u16(names ...string) uint16 { return uint16(b.get(names...)) }

// maybe returns v8dbg_<name>, or def when the binary lacks it.
func (b *builder) maybe(name string, def int64) int64 {
	if v, ok := b.syms.value(name); ok {
		return v
	}
	return def
}

// below turns a frame offset from the frame pointer (negative) into bytes
// below it.
func (b *builder) below(name string) uint64 {
	v := b.get(name)
	if v >= 0 {
		return 0
	}
	return uint64(-v)
}

// newLayout builds the layout of V8 version v from its post-mortem data.
func newLayout(v Version, syms symbols) (*layout, error) {
	b := &builder{syms: syms}
	// The tagging the BPF walk and the readers assume: 8-byte tagged
	// values, heap object pointers tagged 01, Smis in the upper half.
	if b.get("TaggedSize") != 8 || b.get("SystemPointerSize") != 8 {
		return nil, fmt.Errorf("V8 %s: tagged values of %d bytes (pointer compression): %w", v, b.maybe("TaggedSize", 0), ErrUnsupportedVersion)
	}
	if b.get("HeapObjectTag") != 1 || b.get("HeapObjectTagMask") != 3 || b.maybe("SmiTag", 0) != 0 ||
		b.get("SmiTagMask") != 1 || b.get("SmiShiftSize") != 31 {
		return nil, fmt.Errorf("V8 %s: a tagging scheme other than 64-bit Smis: %w", v, ErrUnsupportedVersion)
	}
	l := &layout{
		version:          v,
		fpContext:        b.below("off_fp_context"),
		fpFunction:       b.below("off_fp_function"),
		fpBytecodeArray:  b.below("off_fp_bytecode_array"),
		fpBytecodeOffset: b.below("off_fp_bytecode_offset"),

		firstNonString:        b.u16("FirstNonstringType"),
		typeSFI:               b.u16("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"),
		typeScopeInfo:         b.u16("type_ScopeInfo__SCOPE_INFO_TYPE"),
		typeScript:            b.u16("type_Script__SCRIPT_TYPE"),
		typeBytecodeArray:     b.u16("type_BytecodeArray__BYTECODE_ARRAY_TYPE"),
		typeByteArray:         b.u16("type_ByteArray__BYTE_ARRAY_TYPE"),
		typeCode:              b.u16("type_Code__CODE_TYPE"),
		typeInstructionStream: b.u16("type_InstructionStream__INSTRUCTION_STREAM_TYPE"),
		typeFixedArray:        b.u16("type_FixedArray__FIXED_ARRAY_TYPE"),
		typeWeakFixedArray:    b.u16("type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE"),
		typeInterpreterData:   b.u16("type_InterpreterData__INTERPRETER_DATA_TYPE"),
		strReprMask:           b.u16("StringRepresentationMask"),
		strEncodingMask:       b.u16("StringEncodingMask"),
		strOneByte:            b.u16("OneByteStringTag"),
		strSeq:                uint16(b.maybe("SeqStringTag", 0)),
		strCons:               b.u16("ConsStringTag"),
		strExternal:           b.u16("ExternalStringTag"),
		strSliced:             b.u16("SlicedStringTag"),
		strThin:               b.u16("ThinStringTag"),

		heapMap:          uint64(b.maybe("class_HeapObject__map__Map", 0)),
		mapInstanceType:  b.u64("class_Map__instance_type__uint16_t"),
		strLength:        b.u64("class_String__length__int32_t"),
		seqChars:         b.u64("class_SeqOneByteString__chars__char"),
		consFirst:        b.u64("class_ConsString__first__String"),
		consSecond:       b.u64("class_ConsString__second__String"),
		thinActual:       b.u64("class_ThinString__actual__String"),
		slicedParent:     b.u64("class_SlicedString__parent__String"),
		slicedOffset:     b.u64("class_SlicedString__offset__SMI"),
		externalResource: b.u64("class_ExternalString__resource__Object"),
		fixedLength:      b.u64("class_FixedArrayBase__length__SMI"),
		fixedData:        b.u64("class_FixedArray__data__uintptr_t"),
		functionShared:   b.u64("class_JSFunction__shared__SharedFunctionInfo"),
		sfiFunctionData:  b.u64("class_SharedFunctionInfo__function_data__Object"),
		sfiNameOrScopeInfo: b.u64("class_SharedFunctionInfo__name_or_scope_info__Object",
			"class_SharedFunctionInfo__name_or_scope_info__Tagged_Object_"),
		sfiScript: b.u64("class_SharedFunctionInfo__script_or_debug_info__HeapObject",
			"class_SharedFunctionInfo__script_or_debug_info__Object"),
		scriptName:          b.u64("class_Script__name__Object"),
		scriptSource:        b.u64("class_Script__source__Object"),
		scriptLineEnds:      b.u64("class_Script__line_ends__Object"),
		bytecodeData:        b.u64("class_BytecodeArray__data__uintptr_t"),
		codeDeopt:           b.u64("class_Code__deoptimization_data__FixedArray"),
		codeSourcePositions: b.u64("class_Code__source_position_table__ByteArray"),
		codeBytecodeOffset:  b.u64("class_Code__bytecode_offset_table__ByteArray"),
		codeBytecodeArray:   b.u64("class_Code__bytecode_or_interpreter_data__HeapObject"),
		codeKindMask:        uint32(b.get("CodeKindFieldMask")),
		codeKindShift:       uint32(b.maybe("CodeKindFieldShift", 0)),
		codeKindBaseline:    uint32(b.get("CodeKindBaseline")),
		codeKindInterpreted: uint32(b.get("CodeKindInterpretedFunction")),
		istreamHeader:       b.u64("class_InstructionStream__instruction_start__uintptr_t"),

		scopeContextLocals: b.u64("scopeinfo_idx_ncontextlocals"),
		scopeFirstVars:     b.u64("scopeinfo_idx_first_vars"),

		deoptInlinedCount: b.u64("DeoptimizationDataInlinedFunctionCountIndex"),
		deoptLiterals:     b.u64("DeoptimizationDataLiteralArrayIndex"),
		deoptSFI:          b.u64("DeoptimizationDataSharedFunctionInfoIndex"),
		deoptInlining:     b.u64("DeoptimizationDataInliningPositionsIndex"),
	}
	if len(b.missing) > 0 {
		return nil, fmt.Errorf("V8 %s: no post-mortem data for %s: %w", v, strings.Join(b.missing, ", "), ErrUnsupportedVersion)
	}
	if err := fillGaps(l); err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("V8 %s: %w: %w", v, ErrUnsupportedVersion, err)
	}
	return l, nil
}

// check refuses a layout the BPF walk could not use.
func (l *layout) check() error {
	p := l.walk()
	return p.Check()
}

// walk is what the BPF walk of a process of this V8 needs.
func (l *layout) walk() profiler.V8Proc {
	return profiler.V8Proc{
		FPContext:          uint8(min(l.fpContext, 255)),
		FPFunction:         uint8(min(l.fpFunction, 255)),
		FPBytecodeArray:    uint8(min(l.fpBytecodeArray, 255)),
		FPBytecodeOffset:   uint8(min(l.fpBytecodeOffset, 255)),
		FunctionShared:     uint8(min(l.functionShared, 255)),
		SharedFunctionData: uint8(min(l.sfiFunctionData, 255)),
	}
}
