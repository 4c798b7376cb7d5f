package python

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestLineTablesMatchCPython computes the line of every bytecode offset of
// the code objects of a few standard-library modules, with each installed
// CPython's own line tables, and compares it with what that CPython says:
// co_lines() (3.10+) or dis.findlinestarts().
func TestLineTablesMatchCPython(t *testing.T) {
	for _, py := range testworkload.Pythons(t) {
		t.Run(py.Name, func(t *testing.T) {
			out, err := exec.Command(py.Path, "testdata/lines.py").Output()
			if err != nil {
				t.Fatalf("running lines.py: %v", err)
			}
			var codes []struct {
				Name  string
				First int64
				Table string
				Lines []int64
			}
			if err := json.Unmarshal(out, &codes); err != nil {
				t.Fatal(err)
			}
			kind := locations
			switch {
			case py.Minor <= 9:
				kind = lnotab
			case py.Minor == 10:
				kind = linetable310
			}
			var offsets, wrong int
			for _, c := range codes {
				table, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				ct := codeTable{kind: kind, first: c.First, table: table}
				for i, want := range c.Lines {
					offsets++
					if got := ct.Line(uint32(2 * i)); got != want {
						if wrong++; wrong <= 5 {
							t.Errorf("%s: offset %d: line %d, CPython says %d", c.Name, 2*i, got, want)
						}
					}
				}
			}
			t.Logf("%d code objects, %d offsets, %d lines wrong", len(codes), offsets, wrong)
			if offsets < 10000 {
				t.Errorf("only %d offsets compared", offsets)
			}
		})
	}
}
