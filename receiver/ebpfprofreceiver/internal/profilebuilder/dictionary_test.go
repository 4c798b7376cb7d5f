package profilebuilder

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/frame"
	"github.com/bpfcol/bpfcol/internal/process"
)

// TestLocationsByValue checks that the dictionary's shortcut by shared
// pointers never splits or merges locations: frames equal in value but
// held apart (two processes' copies of one library) share one location,
// and frames differing in any part get their own.
func TestLocationsByValue(t *testing.T) {
	mapping := func() *frame.Mapping {
		return &frame.Mapping{Mapping: process.Mapping{Path: "/usr/lib/libc.so.6", Start: 0x7000, End: 0x9000}, BuildIDGNU: "ab"}
	}
	lines := func(line int64) []frame.Line {
		return []frame.Line{{Name: "inlined", File: "copy.h", Line: line}, {Name: "memcpy", File: "memcpy.c", Line: 3}}
	}
	m1, m2 := mapping(), mapping()
	l1 := lines(10)
	a := frame.Frame{Type: frame.Native, Address: 0x7100, Mapping: m1, Lines: l1}
	sameAsA := frame.Frame{Type: frame.Native, Address: 0x7100, Mapping: m2, Lines: lines(10)}
	otherLine := frame.Frame{Type: frame.Native, Address: 0x7100, Mapping: m1, Lines: lines(11)}
	shorter := frame.Frame{Type: frame.Native, Address: 0x7100, Mapping: m1, Lines: l1[:1]}
	otherAddress := frame.Frame{Type: frame.Native, Address: 0x7104, Mapping: m1, Lines: l1}

	d := newDictionary(pprofile.NewProfiles().Dictionary())
	ia := d.location(&a)
	if again := d.location(&a); again != ia {
		t.Fatalf("the same frame got locations %d and %d", ia, again)
	}
	if got := d.location(&sameAsA); got != ia {
		t.Errorf("an equal frame held apart got location %d, want %d", got, ia)
	}
	seen := map[int32]string{ia: "a"}
	for name, f := range map[string]*frame.Frame{"other line": &otherLine, "fewer lines": &shorter, "other address": &otherAddress} {
		got := d.location(f)
		if prev, ok := seen[got]; ok {
			t.Errorf("%s got location %d, that of %s", name, got, prev)
		}
		seen[got] = name
	}
	if d.mapping(m2) != d.mapping(m1) {
		t.Error("equal mappings held apart got two indexes")
	}
}
