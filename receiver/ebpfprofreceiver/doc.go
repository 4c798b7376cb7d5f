// Package ebpfprofreceiver samples the on-CPU stacks of every process on the
// host with a BPF program on perf events and emits them as pdata profiles.
//
// Data flows one way: BPF sampler → aggregate → symbolize → pdata → consumer.
//
//go:generate mdatagen metadata.yaml
package ebpfprofreceiver // import "github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver"
