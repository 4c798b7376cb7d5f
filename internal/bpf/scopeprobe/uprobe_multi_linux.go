//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// multiSuffix names the copies of the scope programs loaded for
// uprobe_multi links, which need their own expected attach type.
const multiSuffix = "_multi"

// addMultiPrograms adds to spec the copies of the scope programs that
// uprobe_multi links take.
func addMultiPrograms(spec *ebpf.CollectionSpec) {
	for _, name := range []string{uprobeProgScopeEntry, uprobeProgScopeExit} {
		ps := spec.Programs[name].Copy()
		ps.Name += "_m"
		ps.AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs[name+multiSuffix] = ps
	}
}

// multiBatch is what one uprobe_multi link per site kind holds for the
// sites of one cookie.
type multiBatch struct {
	byKind     [ReturnProbe + 1]link.UprobeMultiOptions
	names      [ReturnProbe + 1][]string
	semaphores bool
}

// attachMulti attaches the sites with one uprobe_multi link per cookie and
// site kind.
func (p *Probes) attachMulti(a *Attachment, exe *link.Executable, path string, sites []Site, registered func()) error {
	batches := map[uint64]*multiBatch{}
	var cookies []uint64
	for _, s := range sites {
		if s.Kind < Entry || s.Kind > ReturnProbe {
			return fmt.Errorf("attaching %s of %s: unknown site kind %d", s.Symbol, path, s.Kind)
		}
		cookie := cookieOf(s)
		b := batches[cookie]
		if b == nil {
			b = &multiBatch{}
			batches[cookie] = b
			cookies = append(cookies, cookie)
		}
		o := &b.byKind[s.Kind]
		o.Addresses = append(o.Addresses, s.Offset)
		o.Cookies = append(o.Cookies, cookie)
		o.RefCtrOffsets = append(o.RefCtrOffsets, s.RefCtrOffset)
		b.semaphores = b.semaphores || s.RefCtrOffset != 0
		b.names[s.Kind] = append(b.names[s.Kind], s.Symbol)
	}
	for _, cookie := range cookies {
		progs, err := p.programsFor(cookie, true)
		if err != nil {
			return err
		}
		b := batches[cookie]
		for _, kind := range attachOrder {
			o := &b.byKind[kind]
			if len(o.Addresses) == 0 {
				continue
			}
			if !b.semaphores {
				o.RefCtrOffsets = nil
			}
			var l link.Link
			switch SiteKind(kind) {
			case Entry:
				l, err = exe.UprobeMulti(nil, progs.entry, o)
			case Exit:
				l, err = exe.UprobeMulti(nil, progs.exit, o)
			case ReturnProbe:
				l, err = exe.UretprobeMulti(nil, progs.exit, o)
			}
			if err != nil {
				return fmt.Errorf("attaching %d %s uprobes (%s) to %s with uprobe_multi: %w",
					len(o.Addresses), SiteKind(kind), summarize(b.names[kind]), path, explainPermission(err))
			}
			a.links = append(a.links, l)
			registered()
		}
	}
	return nil
}

// summarize names the first few sites of a failed batch.
func summarize(names []string) string {
	const shown = 3
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}
