package profiler

import "github.com/bpfcol/bpfcol/internal/process"

// NoticeKind is what a Notice tells.
type NoticeKind uint32

// The kinds of notices: enum notice_kind (notice_linux.go checks them
// against the generated values).
const (
	// NoticeProcess: BPF read a process's executable mappings (Mappings):
	// at its first sample, after it exec'd, or after a sample's leaf fell
	// outside the mappings read before.
	NoticeProcess NoticeKind = 1
	// NoticeExit: a process whose mappings the sampler held exited.
	NoticeExit NoticeKind = 2
	// NoticeFile: a walk entered a file with no table (Mappings[0], of
	// process PID): build it, and set it with SetUnwindFile.
	NoticeFile NoticeKind = 3
	// NoticeRead: the sampler cannot read processes' mappings itself (no
	// task work or VMA iterator): read PID's from /proc and set them with
	// SetUnwindMappings, for Image.
	NoticeRead NoticeKind = 4
)

// Notice is what the sampler tells user space about processes and files,
// as it happens: never once per exec, only for processes it sampled.
type Notice struct {
	Kind NoticeKind
	PID  uint32
	// KtimeNs is when it happened, in CLOCK_MONOTONIC nanoseconds; for a
	// NoticeProcess, when the sample that had the mappings read was taken.
	KtimeNs uint64
	// CgroupID is the process's cgroup v2 id (NoticeProcess), 0 unknown.
	CgroupID uint64
	// Exe is the process's executable file (NoticeProcess); zero unknown.
	Exe process.FileKey
	// Image is the process image the mappings are of (NoticeProcess,
	// NoticeRead).
	Image Image
	// New is set on a NoticeProcess of a process the sampler held no
	// mappings of (not after an exec, or a read asked by a sample).
	New bool
	// Overflow is set when the process had more executable mappings than
	// MaxUnwindMappings: Mappings holds the first ones.
	Overflow bool
	// Mappings are the process's executable mappings (NoticeProcess), or
	// the one mapping of the file entered (NoticeFile). Reused by the next
	// ReadNotice.
	Mappings []UnwindMapping
}
