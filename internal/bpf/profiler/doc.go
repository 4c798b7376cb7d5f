// Package profiler loads bpfcol's on-CPU stack sampler: a perf_event BPF
// program on the software cpu-clock of every online CPU that records the
// kernel stack, the frame-pointer user stack and the user registers of the
// running task into a ringbuf.
package profiler
