package v8

import "sort"

// codeRange is the instructions [start, end) of the Code object code.
type codeRange struct {
	start, end, code uint64
	used             uint64 // when last found, in finds
}

// codeRanges are the instruction ranges of code objects found, sorted by
// start, at most max: beyond it the one found least recently goes.
type codeRanges struct {
	rs    []codeRange
	max   int
	clock uint64
}

func newCodeRanges(max int) *codeRanges { return &codeRanges{max: max} }

// find returns the range holding pc.
func (c *codeRanges) find(pc uint64) (codeRange, bool) {
	i := sort.Search(len(c.rs), func(i int) bool { return c.rs[i].end > pc })
	if i == len(c.rs) || c.rs[i].start > pc {
		return codeRange{}, false
	}
	c.clock++
	c.rs[i].used = c.clock
	return c.rs[i], true
}

// add adds r, replacing the ranges it overlaps: code objects that were
// collected, their memory reused.
func (c *codeRanges) add(r codeRange) {
	lo := sort.Search(len(c.rs), func(i int) bool { return c.rs[i].end > r.start })
	hi := lo
	for hi < len(c.rs) && c.rs[hi].start < r.end {
		hi++
	}
	c.clock++
	r.used = c.clock
	c.rs = append(c.rs[:lo], append([]codeRange{r}, c.rs[hi:]...)...)
	if len(c.rs) > c.max {
		oldest := 0
		for i := range c.rs {
			if c.rs[i].used < c.rs[oldest].used {
				oldest = i
			}
		}
		c.rs = append(c.rs[:oldest], c.rs[oldest+1:]...)
	}
}

// remove drops the range that starts at start.
func (c *codeRanges) remove(start uint64) {
	i := sort.Search(len(c.rs), func(i int) bool { return c.rs[i].start >= start })
	if i < len(c.rs) && c.rs[i].start == start {
		c.rs = append(c.rs[:i], c.rs[i+1:]...)
	}
}
