package symbolize

import "github.com/bpfcol/bpfcol/internal/symbolize/sections"

// elfImage is a binary's sections, and the spill the DWARF reader asks
// directly for prefixes of sections; nil decompresses into the heap.
type elfImage struct {
	sections.Image
	spilled *spilledSections
}

// newELFImage returns the image of the file ef, mapped at data, whose
// compressed sections go to spilled.
func newELFImage(img sections.Image, spilled *spilledSections) elfImage {
	if spilled != nil {
		img.Inflater = spilled
	}
	return elfImage{Image: img, spilled: spilled}
}
