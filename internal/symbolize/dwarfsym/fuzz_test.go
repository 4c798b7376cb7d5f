package dwarfsym

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// mapCache is a Cache that keeps everything: enough for inputs of the
// fuzzer's size.
type mapCache map[[2]int64]any

func newMapCache() mapCache { return mapCache{} }

func (c mapCache) Get(k Kind, unit int32, _ []byte, parse func() (any, int64)) any {
	key := [2]int64{int64(k), int64(unit)}
	if v, ok := c[key]; ok {
		return v
	}
	v, _ := parse()
	c[key] = v
	return v
}

func (c mapCache) Add(k Kind, v any, _ int64) {
	if _, ok := c[[2]int64{int64(k), 0}]; !ok {
		c[[2]int64{int64(k), 0}] = v
	}
}

func (c mapCache) DropPrefix() {
	for k := range c {
		if Kind(k[0]) == KindPrefixIndex || Kind(k[0]) == KindPrefixUnit {
			delete(c, k)
		}
	}
}

// FuzzDWARF feeds corrupt DWARF through the table builder and lookups.
func FuzzDWARF(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > symtest.MaxFuzzInput {
			return
		}
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		before := elfbin.ParserPanics()
		defer func() {
			if n := elfbin.ParserPanics() - before; n != 0 {
				t.Fatalf("%d parser panics recovered", n)
			}
		}()
		src, err := loadDWARFSources(ef)
		if err != nil {
			return
		}
		units, err := newDWARFUnits(src)
		if err != nil {
			return
		}
		tab := &Index{cache: newMapCache(), load: func() (dwarfSources, error) { return src, nil }}
		for _, a := range symtest.FuzzAddresses {
			tab.Lookup(a)
		}
		for _, r := range units.ranges[:min(len(units.ranges), 64)] {
			tab.Lookup(r.lo)
		}
	})
}
