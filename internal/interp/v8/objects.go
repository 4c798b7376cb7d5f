package v8

import (
	"encoding/binary"
	"fmt"
)

// maxScriptReads bounds the scripts read (not cached yet) to name one
// object: Scripts at as many addresses may share one long source, each
// read whole for its line ends. Functions beyond are named without their
// file and lines.
const maxScriptReads = 32

// script returns the script sc (tagged) of the process, read once and
// kept while its source stays the same; nil when it cannot be read, or
// *reads scripts were read already.
func (in *instance) script(sc uint64, reads *int) *script {
	if sc == 0 {
		return nil
	}
	key := scriptKey{attach: in.serial, addr: sc}
	if s, ok := in.client.scripts.Get(key); ok {
		if src, err := in.heap.scriptSource(sc); err == nil && src == s.source {
			return s
		}
		in.client.scripts.Remove(key)
	}
	if *reads >= maxScriptReads {
		return nil
	}
	*reads++
	s, err := in.heap.readScript(sc)
	if err != nil {
		return nil
	}
	in.client.scripts.Add(key, s)
	return s
}

// named returns the name of function f and its script's name.
func (in *instance) named(f *function, reads *int) (fn, *script) {
	sc := in.script(f.script, reads)
	out := fn{name: f.name}
	if sc != nil {
		out.file = sc.name
	}
	return out, sc
}

// functionTable reads the SharedFunctionInfo sfi: its name, and the
// positions of its bytecode (nil when V8 has not collected them: it does
// so lazily).
func (in *instance) functionTable(sfi uint64) (*table, fn, error) {
	f, err := in.heap.function(sfi)
	if err != nil {
		return nil, fn{}, err
	}
	own, sc := in.named(f, new(int))
	ps := in.bytecodePositions(f.bytecode)
	if len(ps) == 0 {
		return nil, own, nil
	}
	t := &table{fns: []fn{own}}
	for _, p := range ps {
		t.add(p.code, sc, p.pos, 0)
	}
	return t, own, nil
}

// add appends the entry at code offset code of position pos, in script
// sc of the function of inlining id.
func (t *table) add(code uint32, sc *script, pos uint64, id uint32) {
	line, col := sc.position(scriptOffset(pos))
	t.codes = append(t.codes, code)
	t.at = append(t.at, lineCol{int32(line), int32(col)})
	t.inl = append(t.inl, id)
}

// bytecodePositions reads the source positions of the BytecodeArray bc,
// nil when it has none.
func (in *instance) bytecodePositions(bc uint64) []position {
	h := &in.heap
	if bc == 0 {
		return nil
	}
	spt, err := h.word(bc, h.l.bytecodeSourcePositions)
	if err != nil || !isHeapObject(spt) {
		return nil
	}
	raw, err := h.byteArray(spt, h.l.typeByteArray, maxTableLen)
	if err != nil {
		return nil
	}
	ps, err := decodePositions(raw, maxTableLen)
	if err != nil {
		return nil
	}
	return ps
}

// codeTable reads the optimized Code object code: its function, the
// functions inlined into it, and the positions of its machine code.
func (in *instance) codeTable(code uint64) (*table, fn, error) {
	h := &in.heap
	l := h.l
	c, err := h.readCodeHeader(code)
	if err != nil {
		return nil, fn{}, err
	}
	deopt := le64(c.raw, l.codeDeopt)
	elems, err := h.fixedArray(deopt, l.typeFixedArray, l.deoptInlining+1)
	if err != nil || uint64(len(elems)) <= l.deoptInlining {
		return nil, fn{}, fmt.Errorf("reading the deoptimization data of code %#x: %v", code, err)
	}
	ownF, err := h.function(elems[l.deoptSFI])
	if err != nil {
		return nil, fn{}, err
	}
	reads := 0
	own, ownScript := in.named(ownF, &reads)
	t := &table{fns: []fn{own}}
	scripts := []*script{ownScript}

	n := elems[l.deoptInlinedCount]
	if isSmi(n) && smi(n) > 0 {
		count := min(uint64(smi(n)), maxInlined)
		lits, err := h.fixedArray(elems[l.deoptLiterals], l.typeWeakFixedArray, count)
		if err != nil {
			lits, err = h.fixedArray(elems[l.deoptLiterals], l.typeFixedArray, count)
		}
		if err != nil {
			return nil, fn{}, fmt.Errorf("reading the functions inlined into code %#x: %w", code, err)
		}
		for _, lit := range lits {
			ref, ok := strongRef(lit)
			var f fn
			var sc *script
			if ok {
				if g, err := h.function(ref); err == nil {
					f, sc = in.named(g, &reads)
				}
			}
			if f.name == "" {
				f.name = anonymous
			}
			t.fns = append(t.fns, f)
			scripts = append(scripts, sc)
		}
		raw, err := h.byteArray(elems[l.deoptInlining], l.typeByteArray, maxTableLen)
		if err != nil {
			return nil, fn{}, fmt.Errorf("reading the inlining positions of code %#x: %w", code, err)
		}
		for i := uint64(0); i+l.inliningSize <= uint64(len(raw)) && len(t.inlined) < maxInlined; i += l.inliningSize {
			pos := binary.LittleEndian.Uint64(raw[i:])
			idx := int32(binary.LittleEndian.Uint32(raw[i+l.inliningFunction:]))
			id := uint32(len(t.inlined) + 1)
			caller := inliningID(pos)
			in := inlining{fn: -1, caller: caller}
			if idx >= 0 && int(idx)+1 < len(t.fns) {
				in.fn = int(idx) + 1
			}
			// Inlined calls nest: a caller comes before what it inlined.
			if caller >= id {
				caller, in.caller = 0, 0
			}
			callerFn := t.fnOf(caller)
			if callerFn >= 0 {
				line, col := scripts[callerFn].position(scriptOffset(pos))
				in.call = lineCol{int32(line), int32(col)}
			}
			t.inlined = append(t.inlined, in)
		}
	}

	raw, err := h.byteArray(le64(c.raw, l.codeSourcePositions), l.typeByteArray, maxTableLen)
	if err != nil {
		return nil, own, nil
	}
	ps, err := decodePositions(raw, maxTableLen)
	if err != nil {
		return nil, own, nil
	}
	for _, p := range ps {
		id := inliningID(p.pos)
		if int(id) > len(t.inlined) {
			id = 0
		}
		var sc *script
		if f := t.fnOf(id); f >= 0 {
			sc = scripts[f]
		}
		t.add(p.code, sc, p.pos, id)
	}
	return t, own, nil
}

// fnOf returns the function of inlining id, -1 when unknown.
func (t *table) fnOf(id uint32) int {
	if id == 0 {
		return 0
	}
	if int(id) > len(t.inlined) {
		return -1
	}
	return t.inlined[id-1].fn
}
