package cfi

import (
	"debug/elf"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// referenceRows compiles fdes the straightforward way: every row through
// appendRow into a slice grown by append. compile must give the same rows.
func referenceRows(data []byte, fdes []fde, b *bases, keep func(begin, end uint64) bool) ([]Row, parseStats) {
	var st parseStats
	var rows []Row
	emitRows(archX86_64, data, fdes, b, keep, &st, func(r Row) { rows = appendRow(rows, r) })
	return rows, st
}

// checkCompile compiles a parsed section with compile and with
// referenceRows, and requires the same rows and counts, and no spare
// capacity in compile's rows.
func checkCompile(t *testing.T, data []byte, fdes []fde, b *bases, keep func(begin, end uint64) bool) []Row {
	t.Helper()
	var st parseStats
	got := compile(archX86_64, data, fdes, b, keep, &st) // sorts fdes
	want, wantSt := referenceRows(data, fdes, b, keep)
	if len(want) == 0 {
		want = nil // compile returns no slice for no rows
	}
	requireRows(t, want, got)
	require.Equal(t, wantSt, st)
	require.Equal(t, len(got), cap(got), "compiled rows hold spare capacity")
	return got
}

// requireRows requires got to equal want, nil or not alike. It compares
// with slices.Equal: reflect.DeepEqual takes seconds on node's 372k rows.
func requireRows(t *testing.T, want, got []Row) {
	t.Helper()
	require.Equal(t, want == nil, got == nil, "nil rows")
	if slices.Equal(want, got) {
		return
	}
	require.Equal(t, len(want), len(got), "row count")
	i := 0
	for want[i] == got[i] {
		i++
	}
	require.Equal(t, want[i], got[i], "row %d", i)
}

// checkFill requires t.Fill(other) to equal the straightforward merge:
// fillRows through appendRow into a slice grown by append, copied out.
func checkFill(t *testing.T, a, b *Table) {
	t.Helper()
	var want []Row
	fillRows(a.Rows, b.Rows, func(r Row) { want = appendRow(want, r) })
	if len(want) == 0 {
		want = nil
	}
	got := a.Fill(b).Rows
	requireRows(t, want, got)
	require.Equal(t, len(got), cap(got), "filled rows hold spare capacity")
}

// TestCompileMatchesReference checks compile's counted, exact-size rows
// against referenceRows on the .eh_frame of real binaries and on the
// hand-made sections, and Fill against its straightforward merge.
func TestCompileMatchesReference(t *testing.T) {
	var tables []*Table
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3.11", "/usr/bin/node"} {
		t.Run(path, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s is installed by scripts/install-deps.sh: %v", path, err)
			}
			f, err := elf.Open(path)
			require.NoError(t, err)
			defer f.Close()
			s := f.Section(".eh_frame")
			require.NotNil(t, s)
			data, err := sectionData(f, s)
			require.NoError(t, err)
			b := &bases{section: s.Addr}
			if got := f.Section(".got"); got != nil {
				b.data, b.hasData = got.Addr, true
			}
			var st parseStats
			fdes, err := parseSection(data, ehFrame, b, &st)
			require.NoError(t, err)
			rows := checkCompile(t, data, fdes, b, inRanges(ExecRanges(f)))
			require.Greater(t, len(rows), 1000, "too few rows to test anything")
			tbl, err := EHFrame(f)
			require.NoError(t, err)
			requireRows(t, rows, tbl.Rows)
			tables = append(tables, tbl)
		})
	}
	// Real tables merged with each other: their addresses overlap, their
	// rules differ.
	for _, a := range tables {
		for _, b := range tables {
			checkFill(t, a, b)
		}
	}
	for i, s := range seeds() {
		b := &bases{section: seedBase, data: seedBase, hasData: true}
		var st parseStats
		fdes, _ := parseSection(s.b, s.kind, b, &st)
		rows := checkCompile(t, s.b, fdes, b, nil)
		require.NotEmpty(t, rows, "seed %d", i)
		for _, tbl := range tables {
			checkFill(t, &Table{Rows: rows}, tbl)
			checkFill(t, tbl, &Table{Rows: rows})
		}
	}
}
