package interp

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/process"
)

func TestMappedFileCurrent(t *testing.T) {
	lib := process.Mapping{Start: 0x7000, End: 0x9000, Dev: 1, Inode: 42, Path: "/usr/lib/libpython3.12.so"}
	f := MappedFileOf(&lib)
	moved, replaced, anon := lib, lib, lib
	moved.Start, moved.End = 0x8000, 0xa000
	replaced.Inode = 43
	anon.Path = "[anon:lib]"
	for _, c := range []struct {
		name string
		maps []process.Mapping
		want bool
	}{
		{"same file at the same place", []process.Mapping{{Start: 0x1000, End: 0x2000}, lib}, true},
		{"unmapped", []process.Mapping{{Start: 0x1000, End: 0x2000}}, false},
		{"mapped elsewhere", []process.Mapping{moved}, false},
		{"another file there", []process.Mapping{replaced}, false},
		{"no longer a file", []process.Mapping{anon}, false},
	} {
		if got := f.Current(c.maps); got != c.want {
			t.Errorf("%s: Current = %v, want %v", c.name, got, c.want)
		}
	}
}
