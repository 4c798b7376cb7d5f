// Command flamegraph renders a pprof profile as a flame graph in SVG, so the
// README can show what bpfcol produces without a browser:
//
//	go run ./scripts/flamegraph -o flame.svg out/profiles/latest.pb.gz
//
// Frames are stacked root at the bottom; widths are sample counts. Inlined
// functions get frames of their own, as in pprof.
package main

import (
	"flag"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"os"
	"sort"

	"github.com/google/pprof/profile"
)

type node struct {
	name     string
	value    int64
	children map[string]*node
}

func (n *node) child(name string) *node {
	c, ok := n.children[name]
	if !ok {
		c = &node{name: name, children: map[string]*node{}}
		n.children[name] = c
	}
	return c
}

const (
	width       = 1200.0
	frameHeight = 17.0
	fontSize    = 11.0
	charWidth   = 6.2 // average glyph width at fontSize in a sans font
)

func main() {
	out := flag.String("o", "flamegraph.svg", "output SVG file")
	title := flag.String("title", "bpfcol on-CPU flame graph", "title drawn above the graph")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: flamegraph [-o out.svg] [-title T] profile.pb.gz")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "flamegraph:", err)
		os.Exit(1)
	}
}

func run(in, out, title string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", in, err)
	}
	root := &node{name: "all", children: map[string]*node{}}
	for _, s := range p.Sample {
		if len(s.Value) == 0 {
			continue
		}
		v := s.Value[0]
		n := root
		n.value += v
		// pprof stacks are leaf first; inlined lines are innermost first.
		for i := len(s.Location) - 1; i >= 0; i-- {
			loc := s.Location[i]
			if len(loc.Line) == 0 {
				n = n.child(fmt.Sprintf("0x%x", loc.Address))
				n.value += v
				continue
			}
			for j := len(loc.Line) - 1; j >= 0; j-- {
				name := "?"
				if loc.Line[j].Function != nil {
					name = loc.Line[j].Function.Name
				}
				n = n.child(name)
				n.value += v
			}
		}
	}
	if root.value == 0 {
		return fmt.Errorf("%s has no samples", in)
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	depth := maxDepth(root)
	height := float64(depth+1)*frameHeight + 40
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="Verdana,sans-serif" font-size="%.0f">`+"\n", width, height, fontSize)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="#f8f8f8"/><text x="%.0f" y="20" text-anchor="middle" font-size="15">%s</text>`+"\n", width/2, html.EscapeString(title))
	draw(w, root, 10, width-20, height-frameHeight-5, root.value)
	fmt.Fprintln(w, "</svg>")
	return w.Close()
}

func maxDepth(n *node) int {
	d := 0
	for _, c := range n.children {
		d = max(d, maxDepth(c)+1)
	}
	return d
}

// draw lays n out at x with width w, its children above it, sorted by name
// like flamegraph.pl so equal stacks line up.
func draw(w io.Writer, n *node, x, wd, y float64, total int64) {
	if wd < 0.3 {
		return
	}
	h := fnv.New32a()
	h.Write([]byte(n.name))
	hv := h.Sum32()
	r, g, b := 205+hv%50, 80+(hv>>8)%120, 40+(hv>>16)%40
	label := n.name
	maxChars := int((wd - 6) / charWidth)
	if maxChars < 3 {
		label = ""
	} else if len(label) > maxChars {
		label = label[:maxChars-2] + ".."
	}
	fmt.Fprintf(w, `<g><title>%s (%d samples, %.2f%%)</title><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="rgb(%d,%d,%d)" rx="2"/>`,
		html.EscapeString(n.name), n.value, 100*float64(n.value)/float64(total), x, y, wd, frameHeight-1, r, g, b)
	if label != "" {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`, x+3, y+frameHeight-5, html.EscapeString(label))
	}
	fmt.Fprintln(w, "</g>")
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	cx := x
	for _, name := range names {
		c := n.children[name]
		cw := wd * float64(c.value) / float64(n.value)
		draw(w, c, cx, cw, y-frameHeight, total)
		cx += cw
	}
}
