//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/link"
)

// attachEach attaches every site as its own perf-event uprobe (or
// uretprobe): one syscall and one link per site, on kernels without
// uprobe_multi or when Options.PerfEventUprobes asks.
func (p *Probes) attachEach(a *Attachment, exe *link.Executable, path string, sites []Site, registered func()) error {
	ordered := slices.Clone(sites)
	slices.SortStableFunc(ordered, func(x, y Site) int { return kindRank(x.Kind) - kindRank(y.Kind) })
	for _, s := range ordered {
		cookie := cookieOf(s)
		progs, err := p.programsFor(cookie, false)
		if err != nil {
			return err
		}
		// Address bypasses cilium's own symbol lookup; Offset 0 keeps the
		// address as the exact file offset.
		opts := &link.UprobeOptions{Address: s.Offset, Cookie: cookie, RefCtrOffset: s.RefCtrOffset}
		var l link.Link
		switch s.Kind {
		case Entry:
			l, err = exe.Uprobe(s.Symbol, progs.entry, opts)
		case Exit:
			l, err = exe.Uprobe(s.Symbol, progs.exit, opts)
		case ReturnProbe:
			l, err = exe.Uretprobe(s.Symbol, progs.exit, opts)
		default:
			err = fmt.Errorf("unknown site kind %d", s.Kind)
		}
		if err != nil {
			return fmt.Errorf("attaching %s %s at file offset %#x of %s: %w", s.Kind, s.Symbol, s.Offset, path, explainPermission(err))
		}
		a.links = append(a.links, l)
		registered()
	}
	return nil
}
