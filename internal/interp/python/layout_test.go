package python

import (
	"debug/dwarf"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/bpf/profiler"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// libpython returns the library a pyenv python links.
func libpython(t *testing.T, py testworkload.Python) string {
	t.Helper()
	libs, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(py.Path)), "lib", "libpython3.*.so.1.0"))
	if len(libs) != 1 {
		t.Fatalf("%s: libpython not found (%v)", py.Name, libs)
	}
	return libs[0]
}

// structs finds struct layouts in DWARF: by name, a struct or a typedef
// of one, with its members' offsets.
type structs struct {
	d     *dwarf.Data
	cache map[string]*dwarf.StructType
}

func (s *structs) find(t *testing.T, name string) *dwarf.StructType {
	t.Helper()
	if st, ok := s.cache[name]; ok {
		return st
	}
	r := s.d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			t.Fatalf("no struct %s in DWARF (%v)", name, err)
		}
		if e.Tag != dwarf.TagStructType && e.Tag != dwarf.TagTypedef {
			continue
		}
		if n, _ := e.Val(dwarf.AttrName).(string); n != name {
			continue
		}
		typ, err := s.d.Type(e.Offset)
		if err != nil {
			continue
		}
		for {
			td, ok := typ.(*dwarf.TypedefType)
			if !ok {
				break
			}
			typ = td.Type
		}
		if st, ok := typ.(*dwarf.StructType); ok && !st.Incomplete {
			s.cache[name] = st
			return st
		}
	}
}

// offset returns the offset of the member at path ("gilstate.autoTSSkey")
// in struct name.
func (s *structs) offset(t *testing.T, name, path string) int64 {
	t.Helper()
	st := s.find(t, name)
	var off int64
	for _, part := range strings.Split(path, ".") {
		var f *dwarf.StructField
		for _, x := range st.Field {
			if x.Name == part {
				f = x
			}
		}
		if f == nil {
			t.Fatalf("%s has no member %s", name, path)
		}
		off += f.ByteOffset
		typ := f.Type
		for {
			td, ok := typ.(*dwarf.TypedefType)
			if !ok {
				break
			}
			typ = td.Type
		}
		st, _ = typ.(*dwarf.StructType)
	}
	return off
}

// TestTablesMatchDWARF checks everything read or written into the BPF walk
// for each pyenv CPython (whose builds carry DWARF) against the C structs
// its DWARF describes: the hard-coded tables, what the type objects and
// _Py_DebugOffsets gave, the thread-state key decoded from machine code,
// and 3.13's thread-local.
func TestTablesMatchDWARF(t *testing.T) {
	for minor := 6; minor <= 13; minor++ {
		py := testworkload.PyenvPython(t, minor)
		t.Run(py.Name, func(t *testing.T) {
			path := libpython(t, py)
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := elfimage.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			info, err := analyze(img, path)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			d, err := ef.DWARF()
			if err != nil {
				t.Fatalf("no DWARF: %v", err)
			}
			s := &structs{d: d, cache: map[string]*dwarf.StructType{}}
			l, w := info.layout, info.layout.walk
			check := func(what string, got, want int64) {
				t.Helper()
				if got != want {
					t.Errorf("%s: %d, DWARF says %d", what, got, want)
				}
			}
			switch {
			case minor <= 10:
				check("tstate.frame", int64(w.TStateFrame), s.offset(t, "_ts", "frame"))
				check("f_back", int64(w.FramePrevious), s.offset(t, "_frame", "f_back"))
				check("f_code", int64(w.FrameCode), s.offset(t, "_frame", "f_code"))
				check("f_lasti", int64(w.FrameInstr), s.offset(t, "_frame", "f_lasti"))
			case minor <= 12:
				check("tstate.cframe", int64(w.TStateFrame), s.offset(t, "_ts", "cframe"))
				check("cframe.current_frame", int64(w.CFrameFrame), s.offset(t, "_PyCFrame", "current_frame"))
				check("f_code", int64(w.FrameCode), s.offset(t, "_PyInterpreterFrame", "f_code"))
				check("previous", int64(w.FramePrevious), s.offset(t, "_PyInterpreterFrame", "previous"))
				check("prev_instr", int64(w.FrameInstr), s.offset(t, "_PyInterpreterFrame", "prev_instr"))
				entry := "is_entry"
				if minor == 12 {
					entry = "owner"
				}
				check(entry, int64(w.Entry), s.offset(t, "_PyInterpreterFrame", entry))
			default:
				check("tstate.current_frame", int64(w.TStateFrame), s.offset(t, "_ts", "current_frame"))
				check("f_executable", int64(w.FrameCode), s.offset(t, "_PyInterpreterFrame", "f_executable"))
				check("previous", int64(w.FramePrevious), s.offset(t, "_PyInterpreterFrame", "previous"))
				check("instr_ptr", int64(w.FrameInstr), s.offset(t, "_PyInterpreterFrame", "instr_ptr"))
				check("owner", int64(w.Entry), s.offset(t, "_PyInterpreterFrame", "owner"))
			}
			if minor >= 11 {
				check("co_code_adaptive", int64(l.codeInsns), s.offset(t, "PyCodeObject", "co_code_adaptive"))
			}
			check("str data", int64(l.asciiData), s.find(t, "PyASCIIObject").ByteSize)
			check("compact str data", int64(l.compactData), s.find(t, "PyCompactUnicodeObject").ByteSize)
			check("ob_sval", int64(l.bytesData), s.offset(t, "PyBytesObject", "ob_sval"))
			check("co_name", int64(l.coName), s.offset(t, "PyCodeObject", "co_name"))
			check("co_filename", int64(l.coFilename), s.offset(t, "PyCodeObject", "co_filename"))

			// The key of the thread states, decoded from machine code.
			if minor == 6 {
				sym, ok := img.Symbol("autoTLSkey")
				if !ok {
					t.Fatal("no autoTLSkey")
				}
				check("autoTLSkey", int64(info.tssKey), int64(sym.Value))
			} else {
				rt, _ := img.Symbol("_PyRuntime")
				field := "gilstate.autoTSSkey"
				if minor >= 12 {
					field = "autoTSSkey"
				}
				key := int64(rt.Value) + s.offset(t, "pyruntimestate", field) + s.offset(t, "_Py_tss_t", "_key")
				check("autoTSSkey._key", int64(info.tssKey), key)
			}
			if minor >= 13 {
				if info.tls.kind != tlsGD {
					t.Fatalf("thread-local reached by %v, want general dynamic", info.tls.kind)
				}
				sym, ok := img.Symbol("_Py_tss_tstate")
				if !ok {
					t.Fatal("no _Py_tss_tstate")
				}
				off, err := img.Uint64(info.tls.slot + 8)
				if err != nil {
					t.Fatal(err)
				}
				check("_Py_tss_tstate's offset in the TLS block", int64(off)+info.tls.offset, int64(sym.Value))
			}
			if w.Layout == 0 || w.FrameBytes > profiler.PythonFrameBytesMax {
				t.Errorf("walk layout %+v", w)
			}
		})
	}
}
