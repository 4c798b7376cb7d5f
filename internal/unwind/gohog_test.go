package unwind

import (
	"encoding/hex"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

type goInsn struct {
	addr uint64
	code []byte
	asm  string
}

// goObjdump lists one function with `go tool objdump`, which also gives the
// bytes the analysis is fed.
func goObjdump(t *testing.T, bin, fn string) []goInsn {
	t.Helper()
	out, err := exec.Command("go", "tool", "objdump", "-s", "^"+strings.ReplaceAll(fn, ".", `\.`)+"$", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool objdump %s: %v\n%s", fn, err, out)
	}
	var insns []goInsn
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		var parts []string
		for _, p := range f {
			if p != "" {
				parts = append(parts, p)
			}
		}
		if len(parts) < 4 || !strings.HasPrefix(parts[1], "0x") {
			continue
		}
		addr, err := strconv.ParseUint(parts[1][2:], 16, 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		code, err := hex.DecodeString(parts[2])
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		insns = append(insns, goInsn{addr: addr, code: code, asm: strings.Join(strings.Fields(parts[3]), " ")})
	}
	if len(insns) == 0 {
		t.Fatalf("go tool objdump found no instructions for %s:\n%s", fn, out)
	}
	return insns
}

// TestGoHog checks main.leaf and main.middle instruction by instruction.
// Expected answers follow from the listing: Go lays out the prologue, body,
// epilogue and then the morestack tail, which the stack-bound check enters
// at depth 0.
func TestGoHog(t *testing.T) {
	bin := testworkload.BuildGo(t, "gohog")
	for _, fn := range []string{"main.leaf", "main.middle"} {
		insns := goObjdump(t, bin, fn)
		var code []byte
		for _, in := range insns {
			code = append(code, in.code...)
		}
		start := insns[0].addr
		fun := Analyze(code, start)
		const frame = -1
		want, saw := 0, map[string]bool{}
		for _, in := range insns {
			slot, ok := fun.ReturnAddressSlot(in.addr)
			got := slot
			if !ok {
				got = frame
			}
			if got != want {
				t.Errorf("%s+%#x %s: got (%d,%v), want slot %d (-1: none)", fn, in.addr-start, in.asm, slot, ok, want)
			}
			saw[in.asm] = true
			switch {
			case in.asm == "PUSHQ BP":
				want = 8
			case in.asm == "MOVQ SP, BP":
				want = frame
			case in.asm == "POPQ BP", in.asm == "RET":
				want = 0
			}
			if strings.HasPrefix(in.asm, "CALL runtime.morestack") {
				saw["morestack"] = true
			}
		}
		switch fn {
		case "main.leaf":
			if saw["PUSHQ BP"] {
				t.Errorf("main.leaf pushes BP; the workload no longer has a frameless leaf")
			}
		case "main.middle":
			for _, must := range []string{"PUSHQ BP", "MOVQ SP, BP", "POPQ BP", "RET", "morestack"} {
				if !saw[must] {
					t.Errorf("main.middle has no %q; the test no longer covers it", must)
				}
			}
		}
	}
}
