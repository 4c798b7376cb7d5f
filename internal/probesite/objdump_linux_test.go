package probesite

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// disassembled is one instruction as objdump prints it.
type disassembled struct {
	addr uint64
	text string // mnemonic and operands
}

// objdumpFunction disassembles fn with objdump, the ground truth for
// instruction boundaries and mnemonics.
func objdumpFunction(t testing.TB, bin string, fn Function) []disassembled {
	t.Helper()
	return objdumpFunctionWith(t, "objdump", bin, fn)
}

// objdumpFunctionWith is objdumpFunction with another objdump (another
// architecture's).
func objdumpFunctionWith(t testing.TB, objdump, bin string, fn Function) []disassembled {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, objdump), "-d", "--no-show-raw-insn", "-w",
		"--start-address="+strconv.FormatUint(fn.Start, 10),
		"--stop-address="+strconv.FormatUint(fn.End, 10), bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var insts []disassembled
	for _, line := range strings.Split(string(out), "\n") {
		addr, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(addr, 16, 64)
		if err != nil {
			continue
		}
		insts = append(insts, disassembled{addr: a, text: strings.TrimSpace(rest)})
	}
	return insts
}
