package ebpfprofreceiver

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
)

// Frame-by-frame agreement with perf: the caller -> callee edges of
// bpfcol's stacks of a process against those of perf's stacks of it
// (perf record --call-graph dwarf over the same window). A function is
// told by where its code starts, the start of the .eh_frame FDE that holds
// its frame's address in its file, so that two names of one function
// (__libc_start_main and __libc_start_main_impl), or a stripped binary's
// local functions, which neither tool names, compare the same; frames in
// no such file (the vDSO, JIT code) are told by their names.

// perfFrame is a user frame of a stack perf recorded: ip is as perf
// prints it, an offset in its file (an executable that is not
// position-independent too), a caller's one byte before its return
// address.
type perfFrame struct {
	name, dso string
	ip        uint64
}

// perfScript returns the user stacks perf recorded, leaf first, by pid:
// one frame per address, named after the function the address is in
// (--no-inline: perf 6.1 otherwise prints the functions inlined there in
// its place).
func perfScript(t *testing.T, perf, data string) map[int][][]perfFrame {
	t.Helper()
	out, err := exec.Command(perf, "script", "--no-inline", "-i", data, "-F", "pid,ip,sym,dso").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	stacks := map[int][][]perfFrame{}
	pid := -1
	var cur []perfFrame
	flush := func() {
		if pid >= 0 {
			stacks[pid] = append(stacks[pid], cur)
		}
		pid, cur = -1, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case !strings.HasPrefix(line, "\t"):
			flush()
			pid, _ = strconv.Atoi(strings.TrimSpace(line))
		default:
			// "\t ADDR SYM (DSO)"
			f := strings.TrimSpace(line)
			addr, rest, _ := strings.Cut(f, " ")
			i := strings.LastIndex(rest, " (")
			if i < 0 {
				continue
			}
			sym, dso := rest[:i], rest[i+2:len(rest)-1]
			if strings.HasPrefix(dso, "[kernel") {
				continue
			}
			if j := strings.LastIndex(sym, "+0x"); j > 0 {
				sym = sym[:j]
			}
			ip, _ := strconv.ParseUint(addr, 16, 64)
			cur = append(cur, perfFrame{name: sym, dso: dso, ip: ip})
		}
	}
	flush()
	return stacks
}

// perfNames returns the names of a perf stack's frames.
func perfNames(stack []perfFrame) []string {
	names := make([]string, len(stack))
	for i, f := range stack {
		names[i] = f.name
	}
	return names
}

// fnID tells a function: its file and where its FDE starts there, or,
// for code in no file with an .eh_frame, its name.
type fnID struct {
	file  string
	start uint64
	name  string
}

// edge is a call: caller -> callee.
type edge struct{ caller, callee fnID }

// named reports whether a name is one: perf prints "[unknown]" where
// bpfcol gives none.
func named(fn string) bool { return fn != "" && fn != "[unknown]" && !strings.HasPrefix(fn, "0x") }

// elfFuncs is what telling a file's functions takes: its loadable
// segments, to turn a file offset into an address, and its FDEs' starts,
// sorted.
type elfFuncs struct {
	loads  []elf.ProgHeader
	starts []uint64
}

// funcIndex tells functions apart by their files' FDEs.
type funcIndex struct {
	files map[string]*elfFuncs // nil: not an ELF file with .eh_frame_hdr
	names map[fnID]string      // a name each tool gave, for messages
}

func newFuncIndex() *funcIndex {
	return &funcIndex{files: map[string]*elfFuncs{}, names: map[fnID]string{}}
}

func (x *funcIndex) file(path string) *elfFuncs {
	if f, ok := x.files[path]; ok {
		return f
	}
	f := readELFFuncs(path)
	x.files[path] = f
	return f
}

// readELFFuncs reads path's segments and the table of .eh_frame_hdr; nil
// if it has none the common encodings describe.
func readELFFuncs(path string) *elfFuncs {
	if !strings.HasPrefix(path, "/") {
		return nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	hdr := f.Section(".eh_frame_hdr")
	if hdr == nil {
		return nil
	}
	data, err := hdr.Data()
	// version 1; eh_frame_ptr sdata4 pcrel; fde_count udata4; table
	// datarel sdata4, relative to the section's address.
	if err != nil || len(data) < 12 || data[0] != 1 || data[2] != 0x03 || data[3] != 0x3b {
		return nil
	}
	n := int(binary.LittleEndian.Uint32(data[8:]))
	if 12+8*n > len(data) {
		return nil
	}
	out := &elfFuncs{starts: make([]uint64, n)}
	for i := range n {
		out.starts[i] = uint64(int64(hdr.Addr) + int64(int32(binary.LittleEndian.Uint32(data[12+8*i:]))))
	}
	slices.Sort(out.starts)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			out.loads = append(out.loads, p.ProgHeader)
		}
	}
	return out
}

// at returns the start of the FDE holding vaddr.
func (f *elfFuncs) at(vaddr uint64) (uint64, bool) {
	i, found := slices.BinarySearch(f.starts, vaddr)
	if found {
		return vaddr, true
	}
	if i == 0 {
		return 0, false
	}
	return f.starts[i-1], true
}

// vaddr turns an offset in f into an address of f's.
func (f *elfFuncs) vaddr(off uint64) (uint64, bool) {
	for _, p := range f.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// ours tells the function of one of bpfcol's frames, whose address is in
// its file's addresses.
func (x *funcIndex) ours(fr pprofiletest.StackLocation) fnID {
	id := fnID{name: fr.Function()}
	if f := x.file(fr.File); f != nil {
		if start, ok := f.at(fr.Address); ok {
			id = fnID{file: fr.File, start: start}
		}
	}
	x.note(id, fr.Function())
	return id
}

// theirs tells the function of one of perf's frames (perf already took a
// caller's address one byte before its return address, as bpfcol does).
func (x *funcIndex) theirs(fr perfFrame) fnID {
	id := fnID{name: fr.name}
	if f := x.file(fr.dso); f != nil {
		if vaddr, ok := f.vaddr(fr.ip); ok {
			if start, ok := f.at(vaddr); ok {
				id = fnID{file: fr.dso, start: start}
			}
		}
	}
	x.note(id, fr.name)
	return id
}

func (x *funcIndex) note(id fnID, name string) {
	if named(name) && x.names[id] == "" {
		x.names[id] = name
	}
}

// known reports whether id tells a function: a name, or a place in a file.
func (id fnID) known() bool { return id.file != "" || named(id.name) }

func (x *funcIndex) String(id fnID) string {
	if n := x.names[id]; n != "" {
		return n
	}
	if id.file != "" {
		return fmt.Sprintf("%s+%#x", id.file[strings.LastIndex(id.file, "/")+1:], id.start)
	}
	return "?"
}

// edgeAgreement is how many of bpfcol's caller -> callee edges of one
// process, each counted once per sample it is in, perf's stacks of the
// same process also hold.
type edgeAgreement struct {
	edges    int64 // every edge of bpfcol's samples
	compared int64 // those in the part of the stacks perf has
	matched  int64
	missing  map[edge]int64 // compared, not in perf's stacks
	index    *funcIndex
}

// compareEdges compares bpfcol's samples of a process with perf's stacks
// of it. perf's DWARF unwinding copies 8 KiB of stack
// per sample and stops where that ends or where a frame has no CFI (JIT
// code): an edge is compared only where perf has the part of the stack it
// is in, where perf unwound out of its callee at least once. An edge with
// a function neither named nor in a file with an .eh_frame cannot be told.
func compareEdges(x *funcIndex, ours []pprofiletest.Sample, theirs [][]perfFrame) edgeAgreement {
	perfEdges := map[edge]bool{}
	unwoundOut := map[fnID]bool{}
	for _, st := range theirs {
		for i := 0; i+1 < len(st); i++ {
			e := edge{caller: x.theirs(st[i+1]), callee: x.theirs(st[i])}
			if e.caller.known() && e.callee.known() {
				perfEdges[e] = true
				unwoundOut[e.callee] = true
			}
		}
	}
	a := edgeAgreement{missing: map[edge]int64{}, index: x}
	for _, s := range ours {
		frames := machineLocations(s.UserLocations())
		for i := 0; i+1 < len(frames); i++ {
			e := edge{caller: x.ours(frames[i+1]), callee: x.ours(frames[i])}
			a.edges += s.Count
			if !e.caller.known() || !e.callee.known() || !unwoundOut[e.callee] {
				continue
			}
			a.compared += s.Count
			if perfEdges[e] {
				a.matched += s.Count
			} else {
				a.missing[e] += s.Count
			}
		}
	}
	return a
}

// machineLocations leaves out interpreted frames (CPython's): they have
// no machine address, so perf's stacks cannot hold them, and without them
// the interpreter's own native frames are as perf walks them.
func machineLocations(frames []pprofiletest.StackLocation) []pprofiletest.StackLocation {
	out := frames[:0:0]
	for _, f := range frames {
		if f.Type != conventions.FrameTypeCPython {
			out = append(out, f)
		}
	}
	return out
}

// worstMissing returns the most frequent edges bpfcol has and perf has not.
func (a edgeAgreement) worstMissing(n int) []string {
	type kv struct {
		e edge
		n int64
	}
	var all []kv
	for e, c := range a.missing {
		all = append(all, kv{e, c})
	}
	slices.SortFunc(all, func(x, y kv) int { return int(y.n - x.n) })
	var out []string
	for _, x := range all[:min(n, len(all))] {
		out = append(out, fmt.Sprintf("%s -> %s (%d)", a.index.String(x.e.caller), a.index.String(x.e.callee), x.n))
	}
	return out
}
