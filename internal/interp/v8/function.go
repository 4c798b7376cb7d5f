package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// anonymous is the name of a function without one, as V8's stack traces
// write it.
const anonymous = "<anonymous>"

// function is what names a SharedFunctionInfo: its name, and its script.
type function struct {
	name string
	// script is the tagged address of its Script, 0 when it has none
	// (a builtin) or it could not be read.
	script uint64
	// bytecode is its BytecodeArray, 0 when it has none now.
	bytecode uint64
	// ident holds the words that tell it from another object later
	// allocated at its address.
	ident [4]uint64
}

// function reads the SharedFunctionInfo sfi (tagged).
func (h *heap) function(sfi uint64) (*function, error) {
	if err := h.expect(sfi, h.l.typeSFI); err != nil {
		return nil, fmt.Errorf("reading function %#x: %w", sfi, err)
	}
	f := &function{}
	var err error
	f.ident, err = h.functionIdent(sfi)
	if err != nil {
		return nil, err
	}
	f.name, err = h.functionName(sfi)
	if err != nil {
		return nil, fmt.Errorf("reading the name of function %#x: %w", sfi, err)
	}
	if s, err := h.word(sfi, h.l.sfiScript); err == nil && isHeapObject(s) {
		if t, err := h.typeOf(s); err == nil && t == h.l.typeScript {
			f.script = s
		}
	}
	f.bytecode = h.functionBytecode(sfi)
	return f, nil
}

// functionIdent reads the words of sfi that change when another object
// takes its address: its map, data, name and script.
func (h *heap) functionIdent(sfi uint64) ([4]uint64, error) {
	var id [4]uint64
	for i, off := range []uint64{h.l.heapMap, h.l.sfiFunctionData, h.l.sfiNameOrScopeInfo, h.l.sfiScript} {
		w, err := h.word(sfi, off)
		if err != nil {
			return id, err
		}
		id[i] = w
	}
	return id, nil
}

// functionName reads sfi's name as V8's profiler reports it: its own name,
// else the name inferred from where it was defined, else anonymous.
func (h *heap) functionName(sfi uint64) (string, error) {
	nos, err := h.word(sfi, h.l.sfiNameOrScopeInfo)
	if err != nil {
		return "", err
	}
	if !isHeapObject(nos) {
		return anonymous, nil
	}
	t, err := h.typeOf(nos)
	if err != nil {
		return "", err
	}
	var name string
	switch {
	case t < h.l.firstNonString:
		name, err = h.str(nos, maxNameLen)
	case t == h.l.typeScopeInfo:
		name, err = h.scopeName(nos)
	}
	if err != nil {
		return "", err
	}
	if name == "" {
		return anonymous, nil
	}
	return name, nil
}

// scopeName reads the function's name from its ScopeInfo: the function
// variable's name, else the inferred name.
func (h *heap) scopeName(si uint64) (string, error) {
	l := h.l
	// The first slots: the flags, then (among them) the context locals'
	// count, then the variable part.
	head := make([]byte, (l.scopeFirstVars)*8)
	if err := h.read(si, l.heapMap+8, head); err != nil {
		return "", err
	}
	flagsWord := binary.LittleEndian.Uint64(head)
	locals := binary.LittleEndian.Uint64(head[l.scopeContextLocals*8:])
	if !isSmi(flagsWord) || !isSmi(locals) || smi(locals) < 0 {
		return "", errors.New("a scope info without flags or locals")
	}
	flags := uint32(smi(flagsWord))
	n := uint64(smi(locals))
	slot := l.scopeFirstVars
	if n < l.scopeMaxInlinedLocals {
		slot += 2 * n // names, then infos
	} else {
		slot += 1 + n // a hash table of names, then infos
	}
	if flags>>l.scopeSavedClassBit&1 != 0 {
		slot++
	}
	read := func(slot uint64) (uint64, error) {
		if slot > 1<<16 {
			return 0, errors.New("a scope info slot out of range")
		}
		return h.word(si, l.heapMap+8+slot*8)
	}
	if flags>>l.scopeFunctionVarShift&l.scopeFunctionVarMask != 0 {
		v, err := read(slot)
		if err != nil {
			return "", err
		}
		if name, err := h.strIfString(v); err != nil || name != "" {
			return name, err
		}
		slot += 2
	}
	if flags>>l.scopeInferredBit&1 != 0 {
		v, err := read(slot)
		if err != nil {
			return "", err
		}
		return h.strIfString(v)
	}
	return "", nil
}

// strIfString reads v when it is a String, "" when it is another value
// (a Smi zero, undefined).
func (h *heap) strIfString(v uint64) (string, error) {
	if !isHeapObject(v) {
		return "", nil
	}
	t, err := h.typeOf(v)
	if err != nil {
		return "", err
	}
	if t >= h.l.firstNonString {
		return "", nil
	}
	return h.str(v, maxNameLen)
}

// functionBytecode returns sfi's BytecodeArray: its function data, or
// the one its InterpreterData or baseline Code holds; 0 when it has none.
func (h *heap) functionBytecode(sfi uint64) uint64 {
	data, err := h.word(sfi, h.l.sfiFunctionData)
	if err != nil || !isHeapObject(data) {
		return 0
	}
	for range 3 {
		t, err := h.typeOf(data)
		if err != nil {
			return 0
		}
		var next uint64
		switch t {
		case h.l.typeBytecodeArray:
			return data
		case h.l.typeInterpreterData:
			next, err = h.word(data, h.l.interpreterDataBytecode)
		case h.l.typeCode:
			next, err = h.word(data, h.l.codeBytecodeArray)
		default:
			return 0
		}
		if err != nil || !isHeapObject(next) {
			return 0
		}
		data = next
	}
	return 0
}

// script is what names a Script's positions: its name, and where its
// lines end.
type script struct {
	name string
	// ends holds the offset of each line's terminator, in order.
	ends []uint32
	// source identifies the source the ends were computed from.
	source uint64
}

// bytes is what s holds.
func (s *script) bytes() int64 { return int64(len(s.name) + 4*len(s.ends) + 48) }

// position returns the 1-based line and column of offset pos.
func (s *script) position(pos int64) (line, col int64) {
	if pos < 0 || s == nil {
		return 0, 0
	}
	i := sort.Search(len(s.ends), func(i int) bool { return int64(s.ends[i]) >= pos })
	start := int64(0)
	if i > 0 {
		start = int64(s.ends[i-1]) + 1
	}
	return int64(i) + 1, pos - start + 1
}

// scriptSource returns the tagged address of sc's source, which
// identifies what its line ends were computed from.
func (h *heap) scriptSource(sc uint64) (uint64, error) {
	return h.word(sc, h.l.scriptSource)
}

// readScript reads the Script sc: its name, and its line ends, from V8's
// own table when it has one, else computed from its source.
func (h *heap) readScript(sc uint64) (*script, error) {
	if err := h.expect(sc, h.l.typeScript); err != nil {
		return nil, err
	}
	s := &script{}
	if name, err := h.word(sc, h.l.scriptName); err == nil {
		// eval'd code and new Function have no name.
		s.name, _ = h.strIfString(name)
	}
	var err error
	if s.source, err = h.scriptSource(sc); err != nil {
		return nil, err
	}
	if ends, err := h.word(sc, h.l.scriptLineEnds); err == nil && isHeapObject(ends) {
		if words, err := h.fixedArray(ends, h.l.typeFixedArray, maxLineEnds); err == nil {
			s.ends = make([]uint32, 0, len(words))
			for _, w := range words {
				if !isSmi(w) || smi(w) < 0 {
					s.ends = nil
					break
				}
				s.ends = append(s.ends, uint32(smi(w)))
			}
			if s.ends != nil {
				return s, nil
			}
		}
	}
	if s.ends, err = h.lineEnds(s.source); err != nil {
		return nil, fmt.Errorf("reading the source of script %#x: %w", sc, err)
	}
	return s, nil
}

// lineEnds computes the line ends of the String src as V8 does: a line
// ends at \n, at \r not followed by \n, and (in a two-byte string) at
// U+2028 and U+2029.
func (h *heap) lineEnds(src uint64) ([]uint32, error) {
	var ends []uint32
	pos := uint32(0)
	cr := false // the previous character was \r
	err := h.chars(src, maxSource, maxStrDepth, new(int), func(one []byte, two []uint16) error {
		end := func(c uint16) {
			if cr && c != '\n' {
				ends = append(ends, pos-1)
			}
			cr = c == '\r'
			if c == '\n' || c == 0x2028 || c == 0x2029 {
				ends = append(ends, pos)
			}
			pos++
		}
		for _, c := range one {
			end(uint16(c))
		}
		for _, c := range two {
			end(c)
		}
		if len(ends) > maxLineEnds {
			return fmt.Errorf("more than %d lines", maxLineEnds)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cr {
		ends = append(ends, pos-1)
	}
	return ends, nil
}
