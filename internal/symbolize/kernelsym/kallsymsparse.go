package kernelsym

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// errKallsymsHidden is returned when /proc/kallsyms shows only zero
// addresses (kptr_restrict, or a reader without CAP_SYSLOG).
var errKallsymsHidden = errors.New("kallsyms addresses are hidden")

// kallsymsSymbol is one kernel text symbol.
type kallsymsSymbol struct {
	Addr uint64
	// Size is the distance to the next symbol of any type at a higher
	// address in the same module (or in the core kernel); 0 when there is
	// none, in which case the symbol covers only Addr.
	Size uint64
	Name string
	// Module is the module name without brackets, "" for the core kernel.
	// Pseudo modules such as "bpf" show up here too.
	Module string
}

// kallsymsTable resolves kernel addresses from a kallsyms snapshot.
type kallsymsTable struct {
	syms []kallsymsSymbol // text symbols sorted by address, one per address
}

// kallsymsEntry is one parsed line, before filtering to text symbols.
type kallsymsEntry struct {
	addr   uint64
	text   bool
	name   string
	module string
}

// loadKallsyms parses /proc/kallsyms content, keeping text symbols (types
// t, T, w, W). Like the kernel, the first name listed for an address wins,
// and a symbol's size is the distance to the next higher address, counting
// data symbols too so a function never stretches over them.
func loadKallsyms(r io.Reader) (*kallsymsTable, error) {
	var entries []kallsymsEntry
	sawNonZero := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// "ffffffff81000000 T _text" or "ffffffffc0000000 t foo\t[module]".
		fields := strings.Fields(line)
		if len(fields) < 3 || len(fields[1]) != 1 {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing kallsyms line %q: %w", line, err)
		}
		if addr != 0 {
			sawNonZero = true
		}
		var module string
		if len(fields) >= 4 {
			module = strings.TrimSuffix(strings.TrimPrefix(fields[3], "["), "]")
		}
		typ := fields[1][0]
		entries = append(entries, kallsymsEntry{
			addr:   addr,
			text:   typ == 't' || typ == 'T' || typ == 'w' || typ == 'W',
			name:   fields[2],
			module: module,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading kallsyms: %w", err)
	}
	if len(entries) > 0 && !sawNonZero {
		return nil, errKallsymsHidden
	}
	// Stable: among equal addresses the line order, and so the first name,
	// is kept.
	slices.SortStableFunc(entries, func(a, b kallsymsEntry) int { return cmp.Compare(a.addr, b.addr) })
	k := &kallsymsTable{}
	for i := 0; i < len(entries); {
		// The first text name at this address wins; skip the others.
		j, first := i, -1
		for ; j < len(entries) && entries[j].addr == entries[i].addr; j++ {
			if first < 0 && entries[j].text {
				first = j
			}
		}
		if first >= 0 {
			e := entries[first]
			var size uint64
			if j < len(entries) && entries[j].module == e.module {
				size = entries[j].addr - e.addr
			}
			k.syms = append(k.syms, kallsymsSymbol{Addr: e.addr, Size: size, Name: e.name, Module: e.module})
		}
		i = j
	}
	k.syms = slices.Clip(k.syms)
	return k, nil
}

// Len returns the number of text symbols kept.
func (k *kallsymsTable) Len() int { return len(k.syms) }

// Lookup returns the text symbol covering addr and addr's offset in it.
func (k *kallsymsTable) Lookup(addr uint64) (sym kallsymsSymbol, offset uint64, ok bool) {
	i, found := slices.BinarySearchFunc(k.syms, addr, func(s kallsymsSymbol, a uint64) int { return cmp.Compare(s.Addr, a) })
	if !found {
		i--
	}
	if i < 0 {
		return kallsymsSymbol{}, 0, false
	}
	s := k.syms[i]
	off := addr - s.Addr
	if off != 0 && off >= s.Size {
		return kallsymsSymbol{}, 0, false
	}
	return s, off, true
}
