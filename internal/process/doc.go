// Package process reads what bpfcol needs to know about a process from
// /proc: its memory mappings, executable, threads and container.
package process
