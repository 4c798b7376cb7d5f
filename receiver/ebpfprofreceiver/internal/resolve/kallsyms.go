package resolve

import "github.com/bpfcol/bpfcol/internal/symbolize"

// Kallsyms names kernel addresses from a parsed /proc/kallsyms.
type Kallsyms struct {
	Symbols *symbolize.KernelSymbols
}

// SymbolizeKernel implements KernelSymbolizer.
func (k Kallsyms) SymbolizeKernel(addrs []KernelAddr) ([]KernelName, error) {
	out := make([]KernelName, len(addrs))
	for i, a := range addrs {
		addr := a.Addr
		if a.Return {
			addr--
		}
		if sym, _, ok := k.Symbols.Lookup(addr); ok {
			out[i] = KernelName{Name: sym.Name, Module: sym.Module, OK: true}
		}
	}
	return out, nil
}
