package probesite

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/bpfcol/bpfcol/internal/bpf/scopeprobe"
	"github.com/bpfcol/bpfcol/internal/usdt"
)

// usdtPrefix starts a USDT reference: "usdt:provider:name".
const usdtPrefix = "usdt:"

// usdtSites returns one site per USDT site of spec. The sites are nops,
// which the kernel emulates. A probe with a semaphore gets its file
// offset as the uprobe's reference counter, so the kernel raises it while
// the probe is attached and the program runs its argument code.
func (b *Binary) usdtSites(id uint32, spec Spec, kind scopeprobe.SiteKind, byGoroutine bool) ([]scopeprobe.Site, error) {
	probes, err := usdt.Read(b.elf)
	if errors.Is(err, usdt.ErrNoNotes) {
		return nil, fmt.Errorf("usdt:%s:%s: the binary has no USDT probes (no .note.stapsdt): %w", spec.Provider, spec.Name, ErrNoSymbol)
	}
	if err != nil {
		return nil, err
	}
	var sites []scopeprobe.Site
	for _, p := range probes {
		if p.Provider != spec.Provider || p.Name != spec.Name {
			continue
		}
		off, err := b.FileOffset(p.PC)
		if err != nil {
			return nil, fmt.Errorf("usdt:%s:%s: %w", spec.Provider, spec.Name, err)
		}
		site := scopeprobe.Site{
			Kind: kind, Offset: off, ProbeID: id, ScopeByGoroutine: byGoroutine,
			Symbol: fmt.Sprintf("usdt:%s:%s@%#x", p.Provider, p.Name, p.PC),
		}
		if p.Semaphore != 0 {
			if site.RefCtrOffset, err = b.dataFileOffset(p.Semaphore); err != nil {
				return nil, fmt.Errorf("usdt:%s:%s semaphore: %w", spec.Provider, spec.Name, err)
			}
		}
		sites = append(sites, site)
	}
	if len(sites) == 0 {
		return nil, fmt.Errorf("usdt:%s:%s: the binary's USDT probes are %s: %w", spec.Provider, spec.Name, usdtNames(probes), ErrNoSymbol)
	}
	return sites, nil
}

// planUSDT places a probe whose entry is a USDT site. Its exit must be a
// USDT site too: "return" has no function to return from.
func (b *Binary) planUSDT(id uint32, spec Spec, exit string) (Plan, error) {
	var plan Plan
	exitSpec, err := ParseSpec(exit)
	if err != nil {
		return plan, err
	}
	if exit == ExitReturn || exitSpec.Provider == "" {
		return plan, fmt.Errorf("usdt:%s:%s: a USDT entry needs a USDT exit, not %q", spec.Provider, spec.Name, exit)
	}
	// Threads key USDT scopes: a probe site has no function to tell Go code.
	entries, err := b.usdtSites(id, spec, scopeprobe.Entry, false)
	if err != nil {
		return plan, err
	}
	exits, err := b.usdtSites(id, exitSpec, scopeprobe.Exit, false)
	if err != nil {
		return plan, fmt.Errorf("exit: %w", err)
	}
	plan.Sites = append(entries, exits...)
	plan.Notes = append(plan.Notes, fmt.Sprintf("usdt:%s:%s: %d entry and %d exit USDT site(s)",
		spec.Provider, spec.Name, len(entries), len(exits)))
	return plan, nil
}

// dataFileOffset converts the virtual address of file-backed data (a USDT
// semaphore in .probes) into its file offset.
func (b *Binary) dataFileOffset(vaddr uint64) (uint64, error) {
	off, ok := b.syms.Mapper().DataAddressToFileOffset(vaddr)
	if !ok {
		return 0, fmt.Errorf("address %#x is in no file-backed segment", vaddr)
	}
	return off, nil
}

// maxListedUSDT bounds the probes a missing USDT probe's error lists.
const maxListedUSDT = 20

// usdtNames lists the distinct provider:name of probes, for an error
// about a name none of them has (a typo, or the wrong provider).
func usdtNames(probes []usdt.Probe) string {
	seen := map[string]bool{}
	var names []string
	for _, p := range probes {
		n := p.Provider + ":" + p.Name
		if seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > maxListedUSDT {
		return strings.Join(names[:maxListedUSDT], ", ") + fmt.Sprintf(" and %d more", len(names)-maxListedUSDT)
	}
	return strings.Join(names, ", ")
}
