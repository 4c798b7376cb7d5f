// Package uproberecv times the outermost calls of declared functions with
// uprobes and emits one pdata log record per completed scope.
//
// Data flows: process discovery (a /proc scan at start, then exec and exit
// tracepoints) → one attachment per binary, keyed by device and inode and
// refcounted by the live processes that map it → BPF scope probes → ringbuf
// → log records → consumer.
//
//go:generate mdatagen metadata.yaml
package uproberecv // import "github.com/bpfcol/bpfcol/receiver/uproberecv"
