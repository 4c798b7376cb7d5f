// Package pprofconv converts pdata profiles into one pprof profile, the
// format `go tool pprof` reads.
package pprofconv

import (
	"fmt"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfcol/bpfcol/internal/conventions"
)

// labelKeys renames attributes to the short label names pprof users know
// from `-tagfocus=pid=…` and the Go runtime's profiles. Other attributes keep
// their key.
var labelKeys = map[string]string{
	conventions.ProcessPID:            "pid",
	conventions.ProcessExecutableName: "process",
	conventions.ThreadID:              "tid",
	conventions.ThreadName:            "thread",
}

// Convert merges every process of src into one pprof profile. Each sample
// carries its process and thread as labels (pid, process, tid, thread, and
// every other resource or sample attribute under its own key). Sample types
// are the union of the profiles' sample types; the period is the first
// profile's that has one.
func Convert(src pprofile.Profiles) (*profile.Profile, error) {
	c := &converter{
		dict:        src.Dictionary(),
		out:         &profile.Profile{},
		sampleTypes: map[[2]string]int{},
		mappings:    map[int32]*profile.Mapping{},
		functions:   map[int32]*profile.Function{},
		locations:   map[int32]*profile.Location{},
	}
	var start, end int64
	rps := src.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		rp := rps.At(i)
		res := labelsOf(rp.Resource().Attributes())
		sps := rp.ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			profs := sps.At(j).Profiles()
			for k := 0; k < profs.Len(); k++ {
				p := profs.At(k)
				if err := c.addProfile(p, res); err != nil {
					return nil, fmt.Errorf("converting profile %d of resource %d: %w", k, i, err)
				}
				if t := int64(p.Time()); t != 0 && (start == 0 || t < start) {
					start = t
				}
				if e := int64(p.Time()) + int64(p.DurationNano()); e > end {
					end = e
				}
			}
		}
	}
	c.out.TimeNanos = start
	if start != 0 && end > start {
		c.out.DurationNanos = end - start
	}
	// A sample type first seen in a later profile widened the value vector.
	for _, s := range c.out.Sample {
		for len(s.Value) < len(c.out.SampleType) {
			s.Value = append(s.Value, 0)
		}
	}
	if len(c.out.SampleType) > 0 {
		c.out.DefaultSampleType = c.out.SampleType[0].Type
	}
	if err := c.out.CheckValid(); err != nil {
		return nil, fmt.Errorf("checking the pprof profile: %w", err)
	}
	return c.out, nil
}

// converter copies dictionary entries into the pprof profile the first time
// a sample refers to them, so unused entries are left out.
type converter struct {
	dict        pprofile.ProfilesDictionary
	out         *profile.Profile
	sampleTypes map[[2]string]int
	mappings    map[int32]*profile.Mapping
	functions   map[int32]*profile.Function
	locations   map[int32]*profile.Location
	// kernelMapping holds kernel frames that came without a mapping.
	kernelMapping *profile.Mapping
}

// labels are a sample's pprof labels.
type labels struct {
	str map[string]string
	num map[string]int64
}

func (c *converter) str(i int32) (string, error) {
	t := c.dict.StringTable()
	if i < 0 || int(i) >= t.Len() {
		return "", fmt.Errorf("string index %d outside the table of %d", i, t.Len())
	}
	return t.At(int(i)), nil
}

func (c *converter) attribute(i int32) (pprofile.KeyValueAndUnit, string, error) {
	t := c.dict.AttributeTable()
	if i < 0 || int(i) >= t.Len() {
		return pprofile.KeyValueAndUnit{}, "", fmt.Errorf("attribute index %d outside the table of %d", i, t.Len())
	}
	a := t.At(int(i))
	key, err := c.str(a.KeyStrindex())
	return a, key, err
}

func labelsOf(attrs pcommon.Map) labels {
	l := labels{str: map[string]string{}, num: map[string]int64{}}
	attrs.Range(func(k string, v pcommon.Value) bool {
		l.put(k, v)
		return true
	})
	return l
}

func (l labels) put(key string, v pcommon.Value) {
	if short, ok := labelKeys[key]; ok {
		key = short
	}
	if v.Type() == pcommon.ValueTypeInt {
		l.num[key] = v.Int()
		return
	}
	if s := v.AsString(); s != "" {
		l.str[key] = s
	}
}

func (c *converter) sampleTypeIndex(vt pprofile.ValueType) (int, error) {
	typ, err := c.str(vt.TypeStrindex())
	if err != nil {
		return 0, fmt.Errorf("reading the sample type: %w", err)
	}
	unit, err := c.str(vt.UnitStrindex())
	if err != nil {
		return 0, fmt.Errorf("reading the sample unit: %w", err)
	}
	key := [2]string{typ, unit}
	if i, ok := c.sampleTypes[key]; ok {
		return i, nil
	}
	i := len(c.out.SampleType)
	c.out.SampleType = append(c.out.SampleType, &profile.ValueType{Type: typ, Unit: unit})
	c.sampleTypes[key] = i
	return i, nil
}

func (c *converter) addProfile(p pprofile.Profile, res labels) error {
	vi, err := c.sampleTypeIndex(p.SampleType())
	if err != nil {
		return err
	}
	if c.out.PeriodType == nil {
		typ, err := c.str(p.PeriodType().TypeStrindex())
		if err != nil {
			return fmt.Errorf("reading the period type: %w", err)
		}
		unit, err := c.str(p.PeriodType().UnitStrindex())
		if err != nil {
			return fmt.Errorf("reading the period unit: %w", err)
		}
		if typ != "" || unit != "" {
			c.out.PeriodType = &profile.ValueType{Type: typ, Unit: unit}
			c.out.Period = p.Period()
		}
	}
	samples := p.Samples()
	for i := 0; i < samples.Len(); i++ {
		s, err := c.sample(samples.At(i), vi, res)
		if err != nil {
			return fmt.Errorf("sample %d: %w", i, err)
		}
		c.out.Sample = append(c.out.Sample, s)
	}
	return nil
}

func (c *converter) sample(s pprofile.Sample, valueIndex int, res labels) (*profile.Sample, error) {
	// Values pair with timestamps when both are set; a sample with only
	// timestamps counts one per timestamp.
	var v int64
	if s.Values().Len() == 0 {
		v = int64(s.TimestampsUnixNano().Len())
	}
	for _, x := range s.Values().All() {
		v += x
	}
	out := &profile.Sample{Value: make([]int64, len(c.out.SampleType))}
	out.Value[valueIndex] = v

	lbl := labels{str: map[string]string{}, num: map[string]int64{}}
	for k, x := range res.str {
		lbl.str[k] = x
	}
	for k, x := range res.num {
		lbl.num[k] = x
	}
	for _, ai := range s.AttributeIndices().All() {
		a, key, err := c.attribute(ai)
		if err != nil {
			return nil, err
		}
		lbl.put(key, a.Value())
	}
	// pprof has no links: the linked scope's ids become labels, so
	// -tagfocus span_id=... keeps the samples of one call.
	if li := s.LinkIndex(); li != 0 {
		links := c.dict.LinkTable()
		if li < 0 || int(li) >= links.Len() {
			return nil, fmt.Errorf("link index %d outside the table of %d", li, links.Len())
		}
		l := links.At(int(li))
		lbl.str[conventions.LabelTraceID] = l.TraceID().String()
		lbl.str[conventions.LabelSpanID] = l.SpanID().String()
	}
	for k, x := range lbl.str {
		if out.Label == nil {
			out.Label = map[string][]string{}
		}
		out.Label[k] = []string{x}
	}
	for k, x := range lbl.num {
		if out.NumLabel == nil {
			out.NumLabel = map[string][]int64{}
		}
		out.NumLabel[k] = []int64{x}
	}

	stacks := c.dict.StackTable()
	si := s.StackIndex()
	if si < 0 || int(si) >= stacks.Len() {
		return nil, fmt.Errorf("stack index %d outside the table of %d", si, stacks.Len())
	}
	// Both formats list the leaf first.
	for _, li := range stacks.At(int(si)).LocationIndices().All() {
		loc, err := c.location(li)
		if err != nil {
			return nil, err
		}
		out.Location = append(out.Location, loc)
	}
	return out, nil
}

func (c *converter) location(i int32) (*profile.Location, error) {
	if loc, ok := c.locations[i]; ok {
		return loc, nil
	}
	t := c.dict.LocationTable()
	if i < 0 || int(i) >= t.Len() {
		return nil, fmt.Errorf("location index %d outside the table of %d", i, t.Len())
	}
	src := t.At(int(i))
	kernel := false
	for _, ai := range src.AttributeIndices().All() {
		a, key, err := c.attribute(ai)
		if err != nil {
			return nil, fmt.Errorf("location %d: %w", i, err)
		}
		if key == conventions.ProfileFrameType {
			ft := a.Value().Str()
			kernel = ft == conventions.FrameTypeKernel || ft == conventions.FrameTypeBPF
		}
	}
	m, err := c.mapping(src.MappingIndex())
	if err != nil {
		return nil, fmt.Errorf("location %d: %w", i, err)
	}
	if m == nil && kernel {
		m = c.kernel()
	}
	loc := &profile.Location{
		ID:      uint64(len(c.out.Location) + 1),
		Mapping: m,
		Address: src.Address(),
	}
	// Same order in both formats: inlined functions first, the function
	// they were inlined into last.
	for _, l := range src.Lines().All() {
		fn, err := c.function(l.FunctionIndex())
		if err != nil {
			return nil, fmt.Errorf("location %d: %w", i, err)
		}
		loc.Line = append(loc.Line, profile.Line{Function: fn, Line: l.Line(), Column: l.Column()})
		if m != nil {
			m.HasFilenames = m.HasFilenames || fn.Filename != ""
			m.HasLineNumbers = m.HasLineNumbers || l.Line() != 0
		}
	}
	if m != nil && len(loc.Line) > 1 {
		m.HasInlineFrames = true
	}
	c.out.Location = append(c.out.Location, loc)
	c.locations[i] = loc
	return loc, nil
}

func (c *converter) newMapping(file string) *profile.Mapping {
	m := &profile.Mapping{
		ID:   uint64(len(c.out.Mapping) + 1),
		File: file,
		// The receiver already named every frame it could, from the
		// binary, its debug files and debuginfod. pprof must not try
		// again: location addresses are ELF virtual addresses, which
		// its symbolizer would read as runtime addresses.
		HasFunctions: true,
	}
	c.out.Mapping = append(c.out.Mapping, m)
	return m
}

func (c *converter) kernel() *profile.Mapping {
	if c.kernelMapping == nil {
		c.kernelMapping = c.newMapping(conventions.KernelMappingPath)
	}
	return c.kernelMapping
}

// mapping returns nil for index 0, the table's empty entry.
func (c *converter) mapping(i int32) (*profile.Mapping, error) {
	if i == 0 {
		return nil, nil
	}
	if m, ok := c.mappings[i]; ok {
		return m, nil
	}
	t := c.dict.MappingTable()
	if i < 0 || int(i) >= t.Len() {
		return nil, fmt.Errorf("mapping index %d outside the table of %d", i, t.Len())
	}
	src := t.At(int(i))
	file, err := c.str(src.FilenameStrindex())
	if err != nil {
		return nil, fmt.Errorf("mapping %d: %w", i, err)
	}
	var gnu, goID string
	for _, ai := range src.AttributeIndices().All() {
		a, key, err := c.attribute(ai)
		if err != nil {
			return nil, fmt.Errorf("mapping %d: %w", i, err)
		}
		switch key {
		case conventions.ProcessExecutableBuildIDGNU:
			gnu = a.Value().Str()
		case conventions.ProcessExecutableBuildIDGo:
			goID = a.Value().Str()
		}
	}
	m := c.newMapping(file)
	m.Start, m.Limit, m.Offset = src.MemoryStart(), src.MemoryLimit(), src.FileOffset()
	// pprof holds one build id. The GNU one is what debuginfod and
	// symbol servers index; Go binaries without one still get theirs.
	m.BuildID = gnu
	if m.BuildID == "" {
		m.BuildID = goID
	}
	c.mappings[i] = m
	return m, nil
}

func (c *converter) function(i int32) (*profile.Function, error) {
	if fn, ok := c.functions[i]; ok {
		return fn, nil
	}
	t := c.dict.FunctionTable()
	if i < 0 || int(i) >= t.Len() {
		return nil, fmt.Errorf("function index %d outside the table of %d", i, t.Len())
	}
	src := t.At(int(i))
	name, err := c.str(src.NameStrindex())
	if err != nil {
		return nil, fmt.Errorf("function %d name: %w", i, err)
	}
	sys, err := c.str(src.SystemNameStrindex())
	if err != nil {
		return nil, fmt.Errorf("function %d system name: %w", i, err)
	}
	file, err := c.str(src.FilenameStrindex())
	if err != nil {
		return nil, fmt.Errorf("function %d file name: %w", i, err)
	}
	fn := &profile.Function{
		ID:         uint64(len(c.out.Function) + 1),
		Name:       name,
		SystemName: sys,
		Filename:   file,
		StartLine:  src.StartLine(),
	}
	c.out.Function = append(c.out.Function, fn)
	c.functions[i] = fn
	return fn, nil
}
