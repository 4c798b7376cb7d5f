package procwatch

import "time"

// Kind is what happened to a process.
type Kind uint32

// The kinds of events. Read translates the BPF side's kinds
// (enum proc_event_kind) into these.
const (
	// Exec: the process replaced its image with execve.
	Exec Kind = 1
	// Exit: the last thread of the process exited.
	Exit Kind = 2
)

// Event is one process lifecycle event.
type Event struct {
	// PID is the process (thread group) id.
	PID uint32
	// Kind says what happened.
	Kind Kind
	// Exe is the file an Exec event's process now runs, as the kernel saw
	// it at exec; its Ino is zero when unknown (and always for Exit).
	Exe ExeFile
}

// ExeFile identifies an executed file the way stat(2) would.
type ExeFile struct {
	// Dev is the device in stat's st_dev encoding.
	Dev, Ino uint64
	Size     int64
	ModTime  time.Time
}

// Counters are the BPF side's own counts since load.
type Counters struct {
	// Events counts events written to the ringbuf.
	Events uint64
	// LostRingbuf counts events lost because the ringbuf was full.
	LostRingbuf uint64
}
