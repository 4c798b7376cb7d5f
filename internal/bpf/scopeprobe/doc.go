// Package scopeprobe loads bpfcol's scope probes: an entry and an exit BPF
// program attached to uprobes, which time the outermost call of a declared
// function per thread (or per goroutine for Go) and hand one record per
// completed scope to user space through a ringbuf.
package scopeprobe
