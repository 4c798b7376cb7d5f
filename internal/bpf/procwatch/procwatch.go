package procwatch

import "github.com/bpfcol/bpfcol/internal/process"

// Kind is what happened to a process.
type Kind uint32

// The kinds of events. Read translates the BPF side's kinds
// (enum proc_event_kind) into these.
const (
	// Exec: the process replaced its image with execve.
	Exec Kind = 1
	// Exit: the last thread of the process exited.
	Exit Kind = 2
	// MapExec: the process is mapping a file executable (execve mapping the
	// executable and ld.so, ld.so loading a library, dlopen, mmap with
	// PROT_EXEC). The event comes before the mapping exists, so before any
	// of its code can run.
	MapExec Kind = 3
)

// Event is one process lifecycle event.
type Event struct {
	// PID is the process (thread group) id.
	PID uint32
	// Kind says what happened.
	Kind Kind
	// File is the file an Exec event's process now runs, or a MapExec
	// event's mapped file, as the kernel saw it; its Ino is zero when
	// unknown (and always for Exit).
	File process.FileID
	// KTime is when it happened, in CLOCK_MONOTONIC nanoseconds (ktime).
	KTime uint64
	// Path is the file's path as the process sees it: for Exec, as
	// execve resolved it (relative when the caller gave a relative path;
	// the interpreter's for a script); for MapExec, empty when unknown
	// (without BPF LSM), then /proc/PID/maps tells.
	Path string
	// InExecve marks a MapExec event made by execve itself.
	InExecve bool
	// ParentPID is, for Exec, the process's parent (whose working
	// directory a relative Path was most likely given against); zero
	// otherwise.
	ParentPID uint32
}

// Counters are the BPF side's own counts since load.
type Counters struct {
	// Events counts events written to the ringbuf.
	Events uint64
	// LostRingbuf counts events lost because the ringbuf was full.
	LostRingbuf uint64
}

// MappingSource names how a Watcher sees executable file mappings.
type MappingSource string

// The ways mappings are seen, best first.
const (
	// MappingsLSM: a sleepable BPF LSM program on mmap_file (5.7+, with
	// "bpf" in the active LSMs); events carry the path.
	MappingsLSM MappingSource = "lsm/mmap_file"
	// MappingsFentry: fentry on security_mmap_file (5.5+ with BPF
	// trampolines); events carry no path.
	MappingsFentry MappingSource = "fentry/security_mmap_file"
	// MappingsSyscall: the raw tracepoint sys_exit, for mmap(2) returning
	// with PROT_EXEC (4.17+). The mapping exists when the event is sent;
	// events carry no path, and execve's own mappings are not seen (the
	// Exec event covers them).
	MappingsSyscall MappingSource = "raw_tracepoint/sys_exit"
	// MappingsNone: no MapExec events; libraries are found by reading
	// /proc/PID/maps again after exec.
	MappingsNone MappingSource = ""
)

// Options choose what a Watcher watches.
type Options struct {
	// Mappings is the best mapping source to try; worse ones are tried
	// after it. Empty tries MappingsLSM first; MappingsNone watches no
	// mappings.
	Mappings MappingSource
	// NoMappings watches execs and exits only.
	NoMappings bool
}
