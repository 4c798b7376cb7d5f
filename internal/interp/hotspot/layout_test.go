package hotspot

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/interp"
)

// fakeVersionAt is where the fake process keeps its major version.
const fakeVersionAt = fakeSize - 8

// jdk17Tables are JDK 17's tables in a fake process, its version set to
// version, without the fields named in drop.
func jdk17Tables(version int32, drop ...string) *fakeTables {
	var fields []fakeEntry
	for _, e := range jdk17Fields {
		if slices.Contains(drop, e.typ+"::"+e.field) {
			continue
		}
		if e.typ == "Abstract_VM_Version" {
			e.value = fakeBase + fakeVersionAt
		}
		fields = append(fields, e)
	}
	f := newFakeTables(fields, jdk17Sizes, jdk17Ints)
	binary.LittleEndian.PutUint32(f.mem.mem[fakeVersionAt:], uint32(version))
	return f
}

func TestReadVMStructs(t *testing.T) {
	f := jdk17Tables(17)
	vs, err := readVMStructs(f.mem, f.symbol)
	if err != nil {
		t.Fatal(err)
	}
	if got := vs.Fields["nmethod::_compile_id"]; got.Static || got.Offset != 304 {
		t.Errorf("nmethod::_compile_id: %+v, want offset 304", got)
	}
	if got := vs.Fields["CodeCache::_heaps"]; !got.Static || got.Address != 0x131c600 {
		t.Errorf("CodeCache::_heaps: %+v, want static at 0x131c600", got)
	}
	if vs.Sizes["nmethod"] != 352 || vs.Ints["frame::interpreter_frame_last_sp_offset"] != -2 {
		t.Errorf("sizes %v, ints %v", vs.Sizes, vs.Ints)
	}
	if len(vs.Fields) != len(jdk17Fields) {
		t.Errorf("%d fields read, want %d", len(vs.Fields), len(jdk17Fields))
	}

	// Before libjvm's initializers ran, the stride is 0.
	binary.LittleEndian.PutUint64(f.mem.mem[f.syms["gHotSpotVMStructEntryArrayStride"]-fakeBase:], 0)
	if _, err := readVMStructs(f.mem, f.symbol); !errors.Is(err, errNotReady) {
		t.Errorf("tables not initialized: %v, want errNotReady", err)
	}
	// A table's member beyond its stride is refused.
	binary.LittleEndian.PutUint64(f.mem.mem[f.syms["gHotSpotVMStructEntryArrayStride"]-fakeBase:], 32)
	if _, err := readVMStructs(f.mem, f.symbol); err == nil {
		t.Error("an address member beyond the stride was read")
	}
}

func TestReadLayout(t *testing.T) {
	f := jdk17Tables(17)
	vs, err := readVMStructs(f.mem, f.symbol)
	if err != nil {
		t.Fatal(err)
	}
	l, err := readLayout(vs, f.mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	// x86-64's interpreter frame below its frame pointer: sender SP,
	// last SP, Method*, mirror, MDP, cache, locals, bytecode pointer.
	if l.version != 17 || l.fpSenderSP != -1 || l.fpMethod != -3 || l.fpBCP != -8 || l.unsigned5Excluded != 0 {
		t.Errorf("layout %+v", l)
	}
	// The walk reads up to the end of _compile_id (304 + 4) after the
	// 16-byte HeapBlock.
	if got := l.blockHeader + l.walkBlobBytes(); got != 16+308 {
		t.Errorf("the walk reads %d bytes of a block, want %d", got, 16+308)
	}
	cc := &codeCache{low: 0x1000, high: 0x100000, heaps: nil, segmentShift: 7}
	if p := cc.proc(l); p.BlockBytes != 324 || p.FPBCP != -8 || p.NMethodCompileID != 304 {
		t.Errorf("sampler layout %+v", p)
	}

	for _, c := range []struct {
		name    string
		version int32
		drop    []string
		want    string
	}{
		{"JDK 23's nmethod", 23, []string{"CompiledMethod::_scopes_data_begin", "CompiledMethod::_method"}, "CompiledMethod::_scopes_data_begin"},
		{"a future JDK", 99, nil, "JDK 99"},
		{"JDK 20", 20, nil, "JDK 20"},
		{"JDK 8", 8, nil, "JDK 8"},
		{"no code cache", 17, []string{"CodeCache::_heaps"}, "CodeCache::_heaps"},
	} {
		f := jdk17Tables(c.version, c.drop...)
		vs, err := readVMStructs(f.mem, f.symbol)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, err = readLayout(vs, f.mem, 0)
		if !errors.Is(err, interp.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an unsupported layout naming %q", c.name, err, c.want)
		}
	}

	// An interpreter frame laid out otherwise is refused.
	ints := map[string]int64{}
	for k, v := range jdk17Ints {
		ints[k] = v
	}
	ints["frame::interpreter_frame_last_sp_offset"] = -3
	f = newFakeTables(jdk17Tables(17).fields(), jdk17Sizes, ints)
	binary.LittleEndian.PutUint32(f.mem.mem[fakeVersionAt:], 17)
	vs, _ = readVMStructs(f.mem, f.symbol)
	if _, err := readLayout(vs, f.mem, 0); !errors.Is(err, interp.ErrUnsupported) {
		t.Errorf("interpreter frame with its last SP at -3: %v, want unsupported", err)
	}
}
