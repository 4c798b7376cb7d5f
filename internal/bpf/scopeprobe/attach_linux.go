//go:build linux && (amd64 || arm64)

package scopeprobe

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf/link"
)

// The cookie's high half holds flags; bit numbers generated from
// uprobe.bpf.c.
const (
	cookieScopeByG    = uint64(1) << uprobeCookieBitCOOKIE_BIT_SCOPE_BY_G
	cookieReturnProbe = uint64(1) << uprobeCookieBitCOOKIE_BIT_RETURN_PROBE
	cookieFixed       = uint64(1) << uprobeCookieBitCOOKIE_BIT_FIXED
)

// Attachment is the set of uprobes put on one binary. Close detaches them.
type Attachment struct {
	probes *Probes
	links  []link.Link
	sites  int
	multi  bool
}

// Attach puts every site on the binary at path. Any path naming the file
// works, /proc/PID/map_files/... included: the kernel attaches to the
// inode, so every process mapping the file is probed. Either all sites are
// attached or none.
//
// With uprobe_multi (kernel 6.6+) all sites of a kind go into one link, one
// syscall for the lot (uprobe_multi_linux.go); otherwise each site is its
// own perf-event uprobe (perf_event_uprobe_linux.go).
func (p *Probes) Attach(path string, sites []Site) (_ *Attachment, err error) {
	exe, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s for uprobes: %w", path, err)
	}
	a := &Attachment{probes: p, sites: len(sites), multi: p.entryMulti != nil}
	defer func() {
		if err != nil {
			a.closeLinks()
		}
	}()
	// registered is called after each link: only the first registration
	// can wait for a grace period, so the expedited window ends there.
	registered := func() {}
	if e := p.expedite; e != nil {
		e.begin()
		var once sync.Once
		registered = func() { once.Do(e.end) }
	}
	if a.multi {
		err = p.attachMulti(a, exe, path, sites, registered)
	} else {
		err = p.attachEach(a, exe, path, sites, registered)
	}
	registered()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	p.attachments[a] = struct{}{}
	return a, nil
}

// Prepare loads the programs sites of probeID will be attached with, so
// that the first Attach of such sites does not wait for the verifier: the
// time between a process starting and its binary being attached is calls
// missed.
func (p *Probes) Prepare(probeID uint32, byGoroutine, returnProbeExit bool) error {
	_, err := p.programsFor(cookieOf(Site{ProbeID: probeID, ScopeByGoroutine: byGoroutine, ReturnProbeExit: returnProbeExit}), p.entryMulti != nil)
	return err
}

func cookieOf(s Site) uint64 {
	cookie := uint64(s.ProbeID)
	if s.ScopeByGoroutine {
		cookie |= cookieScopeByG
	}
	if s.ReturnProbeExit {
		cookie |= cookieReturnProbe
	}
	return cookie
}

// Links is how many uprobes the attachment holds (sites, not links: a
// uprobe_multi link holds many).
func (a *Attachment) Links() int { return a.sites }

// Multi reports whether the sites went into uprobe_multi links.
func (a *Attachment) Multi() bool { return a.multi }

// Close detaches every uprobe of the attachment. It is safe to call more
// than once.
func (a *Attachment) Close() error {
	a.probes.mu.Lock()
	delete(a.probes.attachments, a)
	a.probes.mu.Unlock()
	return a.closeLinks()
}

func (a *Attachment) closeLinks() error {
	var errs []error
	// In reverse: the entries, attached last, go first (see attachOrder).
	for _, l := range slices.Backward(a.links) {
		errs = append(errs, l.Close())
	}
	a.links = nil
	return errors.Join(errs...)
}
