package python

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"

	"golang.org/x/arch/x86/x86asm"

	"github.com/bpfcol/bpfcol/internal/elfbin"
	"github.com/bpfcol/bpfcol/internal/interp/elfimage"
	"github.com/bpfcol/bpfcol/internal/interp/x86sym"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

// fileName matches the files CPython's interpreter lives in: a static
// python3.X executable, or libpython3.X (with an ABI suffix, 3.6's "m").
var fileName = regexp.MustCompile(`^(?:lib)?python(?:(\d)(?:\.(\d+))?)?[a-z]*(?:\.so(?:\.[\d.]+)?)?$`)

// Candidate reports whether a mapped file's path names a file that may
// hold CPython's interpreter, so that other files are never opened.
func Candidate(p string) bool { return fileName.MatchString(path.Base(p)) }

// evalLoop names the eval loop, whose frames run Python frames.
const evalLoop = "_PyEval_EvalFrameDefault"

// maxLoopCode bounds the eval loop's code scanned for jumps to its cold
// part (about 55 KiB in Debian's build).
const maxLoopCode = 256 << 10

// errNotInterpreter is returned for a file that does not hold the
// interpreter (python3.X linked with libpython, a tool named python-*).
var errNotInterpreter = errors.New("not a CPython interpreter")

// binaryInfo is what a CPython binary, a libpython or a static python,
// tells of every process that runs it.
type binaryInfo struct {
	version Version
	layout  *layout
	// loops are the eval loop's virtual address ranges, its cold part
	// included.
	loops []cfi.Range
	// codeType is PyCode_Type's virtual address: every code object
	// points at it.
	codeType uint64
	// tssKey is the virtual address of the pthread key of thread states
	// (autoTSSkey's); tssInitialized is set when it is a Py_tss_t's key.
	tssKey         uint64
	tssInitialized bool
	// tls is where 3.13's current thread state is (_Py_tss_tstate).
	tls tlsAccess
	// strType and bytesType are PyUnicode_Type's and PyBytes_Type's
	// virtual addresses.
	strType, bytesType uint64
	// addrs are the file's segments, to find a mapping's bias.
	addrs *elfbin.AddressMapper
}

// loadBias is the difference between the runtime and virtual addresses
// of the file mapped at start from offset off.
func (b *binaryInfo) loadBias(start, off uint64) (uint64, bool) {
	return b.addrs.LoadBias(start, off)
}

// analyze reads img, the file at path p.
func analyze(img *elfimage.Image, p string) (*binaryInfo, error) {
	loop, ok := img.Symbol(evalLoop)
	if !ok || loop.Size == 0 {
		return nil, errNotInterpreter
	}
	if _, ok := img.Symbol("PyCode_Type"); !ok {
		return nil, errNotInterpreter
	}
	v, err := version(img, p)
	if err != nil {
		return nil, err
	}
	info := &binaryInfo{version: v}
	if !v.Supported() {
		return info, fmt.Errorf("CPython %s: %w", v, ErrUnsupportedVersion)
	}
	if info.layout, err = findLayout(img, v); err != nil {
		return info, err
	}
	codeType, _ := img.Symbol("PyCode_Type")
	strType, _ := img.Symbol("PyUnicode_Type")
	bytesType, _ := img.Symbol("PyBytes_Type")
	info.codeType, info.strType, info.bytesType = codeType.Value, strType.Value, bytesType.Value
	info.addrs = img.Addresses()
	if info.loops, err = loopRanges(img, loop); err != nil {
		return info, err
	}
	if info.tssKey, info.tssInitialized, err = tssKey(img, v); err != nil {
		return info, err
	}
	if v.atLeast(13) {
		if info.tls, err = findTLS(img); err != nil {
			return info, err
		}
	}
	return info, nil
}

// version reads the version from Py_Version (3.11+), else from the
// file's name.
func version(img *elfimage.Image, p string) (Version, error) {
	if s, ok := img.Symbol("Py_Version"); ok {
		hex, err := img.Uint32(s.Value)
		if err != nil {
			return Version{}, fmt.Errorf("reading Py_Version: %w", err)
		}
		return Version{int(hex >> 24), int(hex >> 16 & 0xff)}, nil
	}
	m := fileName.FindStringSubmatch(path.Base(p))
	if m == nil || m[2] == "" {
		return Version{}, fmt.Errorf("no version in %s: neither Py_Version nor a versioned name", p)
	}
	major, _ := strconv.Atoi(m[1])
	minor, err := strconv.Atoi(m[2])
	if err != nil || minor > 99 {
		return Version{}, fmt.Errorf("no version in %s", p)
	}
	return Version{major, minor}, nil
}

// loopRanges returns the eval loop's range, and that of its cold part:
// the code the compiler moved out of it (error paths, with PGO much more),
// where a call also leaves a frame of the loop. It is the symbol
// <loop>.cold where there is a symbol table, else the FDE that most jumps
// from the loop to outside it land in (Debian's python3.11: all 314
// targets, in 13.9 KiB).
func loopRanges(img *elfimage.Image, loop elfimage.Symbol) ([]cfi.Range, error) {
	main := cfi.Range{Start: loop.Value, End: loop.Value + loop.Size}
	ranges := []cfi.Range{main}
	if cold, ok := img.Symbol(evalLoop + ".cold"); ok && cold.Size > 0 {
		return append(ranges, cfi.Range{Start: cold.Value, End: cold.Value + cold.Size}), nil
	}
	if loop.Size > maxLoopCode {
		return nil, fmt.Errorf("%s of %d bytes: more than %d", evalLoop, loop.Size, maxLoopCode)
	}
	code := make([]byte, loop.Size)
	if err := img.Read(loop.Value, code); err != nil {
		return nil, fmt.Errorf("reading %s: %w", evalLoop, err)
	}
	targets := externalJumps(code, main)
	if len(targets) == 0 {
		return ranges, nil
	}
	fdes, err := cfi.FDERanges(img.File(), targets)
	if err != nil {
		return nil, fmt.Errorf("finding %s's cold part: %w", evalLoop, err)
	}
	// Tail calls may jump to other functions too: the cold part is
	// where most jumps go.
	counts := map[cfi.Range]int{}
	var cold cfi.Range
	for _, r := range fdes {
		if r == (cfi.Range{}) || r == main {
			continue
		}
		counts[r]++
		if counts[r] > counts[cold] {
			cold = r
		}
	}
	if cold != (cfi.Range{}) {
		ranges = append(ranges, cold)
	}
	return ranges, nil
}

// externalJumps returns the targets of the direct jumps (not calls) from
// code, at r, to outside r.
func externalJumps(code []byte, r cfi.Range) []uint64 {
	var out []uint64
	seen := map[uint64]bool{}
	for pc := r.Start; pc < r.End; {
		inst, err := x86sym.Decode(code[pc-r.Start:])
		if err != nil || inst.Len == 0 {
			pc++
			continue
		}
		next := pc + uint64(inst.Len)
		if inst.Op >= x86asm.JA && inst.Op <= x86asm.JS || inst.Op == x86asm.JMP {
			if rel, ok := inst.Args[0].(x86asm.Rel); ok {
				t := uint64(int64(next) + int64(rel))
				if (t < r.Start || t >= r.End) && !seen[t] {
					seen[t] = true
					out = append(out, t)
				}
			}
		}
		pc = next
	}
	return out
}
