package v8

import "fmt"

// fillGaps completes l with the facts V8's post-mortem data leaves out
// for its version. Each was read off a running node of that version (its
// objects dumped with --allow-natives-syntax %DebugPrint and read back
// from its memory) and matches V8's sources of the version; a version
// without a known answer for every gap is refused, never guessed.
func fillGaps(l *layout) error {
	v := l.version
	// V8 11.1-11.3 (node 20): the Code object, which V8 11 split from
	// its InstructionStream, exports only its tagged fields. Its raw
	// fields follow source_position_table: the InstructionStream, the
	// instruction start, the flags (kind in the low bits), then, after
	// two 16-bit fields (builtin id, kind-specific flags) that 11.4.59
	// folds into the flags, the instruction size. The InstructionStream
	// points back at its Code right after its map.
	if !(v.Major == 11 && v.Minor >= 1 && v.Minor <= 3) {
		return fmt.Errorf("V8 %s: the layout of its Code objects is not known: %w", v, ErrUnsupportedVersion)
	}
	l.codeInstructionStream = l.codeSourcePositions + 8
	l.codeInstructionStart = l.codeSourcePositions + 16
	l.codeFlags = l.codeSourcePositions + 24
	l.codeInstructionSize = l.codeSourcePositions + 32
	l.istreamCode = l.heapMap + 8

	// Since 9.4 BytecodeArray exports no source_position_table: it
	// follows the constant pool and the handler table, after the length.
	l.bytecodeSourcePositions = l.fixedLength + 24
	// InterpreterData (bytecode run under a trampoline of its own) holds
	// its BytecodeArray first.
	l.interpreterDataBytecode = l.heapMap + 8
	// A cached external string keeps its characters' address right after
	// its resource.
	l.externalData = l.externalResource + 8

	// ScopeInfo's flags (scope-info.tq's ScopeFlags, a Smi): bit 10 says
	// a saved class variable slot follows the locals, bits 12-13 whether
	// the function's own name follows (a name and a slot index), bit 14
	// whether its inferred name follows. Up to 75 context locals have
	// their names inline, more a hash table in one slot.
	l.scopeSavedClassBit = 10
	l.scopeFunctionVarShift, l.scopeFunctionVarMask = 12, 3
	l.scopeInferredBit = 14
	l.scopeMaxInlinedLocals = 75

	// A DeoptimizationData's inlining positions are InliningPosition
	// records: a SourcePosition (8 bytes), then the inlined function's
	// index in the literal array (int32), padded to 16.
	l.inliningSize, l.inliningFunction = 16, 8
	return nil
}

// Source positions (SourcePosition, the same since V8 7): bit 0 says the
// position is external (a line in another file, which bpfcol does not
// name), bits 1-30 hold the script offset plus one, bits 31-46 the
// inlining id (0: the code's own function, k: the k-th inlining
// position).
const (
	posExternalBit   = 1
	posOffsetShift   = 1
	posOffsetMask    = 1<<30 - 1
	posInliningShift = 31
	posInliningMask  = 1<<16 - 1
)

// Bytecodes: the prefixes that scale the next bytecode's operands (Wide,
// ExtraWide, and their DebugBreak forms), the same since V8 6.8, and the
// table of bytecode lengths by scale.
const (
	bytecodeWide              = 0
	bytecodeExtraWide         = 1
	bytecodeDebugBreakWide    = 2
	bytecodeDebugBreakExtraWd = 3
	bytecodeSizesSymbol       = "_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE"
)
