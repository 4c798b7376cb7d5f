//go:build !linux || !(amd64 || arm64)

package profiler

import (
	"errors"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
)

var errNotLinux = errors.New("the BPF stack sampler runs only on linux on amd64 or arm64")

// Sampler is a loaded and attached stack sampler. It exists only on linux on amd64 or arm64.
type Sampler struct{}

// CheckSupport reports that sampling needs linux on amd64 or arm64.
func CheckSupport() error { return errNotLinux }

// New fails: sampling needs linux on amd64 or arm64.
func New(Options) (*Sampler, error) { return nil, errNotLinux }

// Read fails: sampling needs linux on amd64 or arm64.
func (*Sampler) Read(*Sample) error { return errNotLinux }

// SetDeadline does nothing: sampling needs linux on amd64 or arm64.
func (*Sampler) SetDeadline(time.Time) {}

// Counters fails: sampling needs linux on amd64 or arm64.
func (*Sampler) Counters() (Counters, error) { return Counters{}, errNotLinux }

// CPUs is zero: sampling needs linux on amd64 or arm64.
func (*Sampler) CPUs() int { return 0 }

// Stop does nothing.
func (*Sampler) Stop() error { return nil }

// Flush does nothing.
func (*Sampler) Flush() error { return nil }

// Close does nothing.
func (*Sampler) Close() error { return nil }

// UnwindRowCapacity is zero: sampling needs linux on amd64 or arm64.
func (*Sampler) UnwindRowCapacity() uint32 { return 0 }

// WriteUnwindRows fails: sampling needs linux on amd64 or arm64.
func (*Sampler) WriteUnwindRows(uint32, []cfi.Row, uint64) error { return errNotLinux }

// SetUnwindFile fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetUnwindFile(process.FileKey, UnwindFile) error { return errNotLinux }

// DeleteUnwindFile fails: sampling needs linux on amd64 or arm64.
func (*Sampler) DeleteUnwindFile(process.FileKey) error { return errNotLinux }

// LookupUnwindFile fails: sampling needs linux on amd64 or arm64.
func (*Sampler) LookupUnwindFile(process.FileKey) (UnwindFile, bool, error) {
	return UnwindFile{}, false, errNotLinux
}

// UnwindFileUse fails: sampling needs linux on amd64 or arm64.
func (*Sampler) UnwindFileUse() (map[process.FileKey]uint32, error) { return nil, errNotLinux }

// SetUnwindMappings fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetUnwindMappings(uint32, Image, []UnwindMapping) (bool, error) {
	return false, errNotLinux
}

// UnwindMappings fails: sampling needs linux on amd64 or arm64.
func (*Sampler) UnwindMappings(uint32) ([]UnwindMapping, Image, bool, error) {
	return nil, Image{}, false, errNotLinux
}

// UnendedThreads fails: sampling needs linux on amd64 or arm64.
func (*Sampler) UnendedThreads() (map[uint32]uint64, error) { return nil, errNotLinux }

// UnreportedThreads fails: sampling needs linux on amd64 or arm64.
func (*Sampler) UnreportedThreads() (map[uint32]uint64, error) { return nil, errNotLinux }

// SetUnwindVDSO fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetUnwindVDSO([]cfi.Row, uint64) error { return errNotLinux }

// DeleteUnwindMappings fails: sampling needs linux on amd64 or arm64.
func (*Sampler) DeleteUnwindMappings(uint32) error { return errNotLinux }

// ReadNotice fails: sampling needs linux on amd64 or arm64.
func (*Sampler) ReadNotice(*Notice) error { return errNotLinux }

// PollNotices does nothing: sampling needs linux on amd64 or arm64.
func (*Sampler) PollNotices() {}

// ComposeError says that sampling needs linux on amd64 or arm64.
func (*Sampler) ComposeError() error { return errNotLinux }

// ComposeStats fails: sampling needs linux on amd64 or arm64.
func (*Sampler) ComposeStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// CheckCompose fails: sampling needs linux on amd64 or arm64.
func CheckCompose() error { return errNotLinux }

// RunStats fails: sampling needs linux on amd64 or arm64.
func (*Sampler) RunStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPURunStats fails: sampling needs linux on amd64 or arm64.
func (*Sampler) OffCPURunStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPUWalkStats fails: sampling needs linux on amd64 or arm64.
func (*Sampler) OffCPUWalkStats() (time.Duration, uint64, error) { return 0, 0, errNotLinux }

// OffCPUTaskWork is false: sampling needs linux on amd64 or arm64.
func (*Sampler) OffCPUTaskWork() bool { return false }

// CheckOffCPUTaskWork fails: sampling needs linux on amd64 or arm64.
func CheckOffCPUTaskWork() error { return errNotLinux }

// OnlineCPUs fails: sampling needs linux on amd64 or arm64.
func OnlineCPUs() ([]int, error) { return nil, errNotLinux }

// SetPythonProc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetPythonProc(uint32, PythonProc) error { return errNotLinux }

// DeletePythonProc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) DeletePythonProc(uint32) error { return errNotLinux }

// SetHotSpotProc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetHotSpotProc(uint32, HotSpotProc) error { return errNotLinux }

// DeleteHotSpotProc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) DeleteHotSpotProc(uint32) error { return errNotLinux }

// SetV8Proc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) SetV8Proc(uint32, V8Proc) error { return errNotLinux }

// DeleteV8Proc fails: sampling needs linux on amd64 or arm64.
func (*Sampler) DeleteV8Proc(uint32) error { return errNotLinux }
