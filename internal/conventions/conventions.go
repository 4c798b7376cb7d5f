// Package conventions is the one home of the attribute keys and values that
// bpfcol writes into, and reads back from, telemetry. Keys the OpenTelemetry
// semantic conventions define come from go.opentelemetry.io/otel/semconv, so
// a version bump is one import line; the names the conventions lack are
// spelled here, once.
package conventions

import (
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Resource attributes of a process.
const (
	ProcessPID            = string(semconv.ProcessPIDKey)
	ProcessExecutablePath = string(semconv.ProcessExecutablePathKey)
	ProcessExecutableName = string(semconv.ProcessExecutableNameKey)
	ContainerID           = string(semconv.ContainerIDKey)
)

// Attributes of a thread.
const (
	ThreadID   = string(semconv.ThreadIDKey)
	ThreadName = string(semconv.ThreadNameKey)
)

// Attributes of a profile mapping: the build ids of its file.
const (
	ProcessExecutableBuildIDGNU = string(semconv.ProcessExecutableBuildIDGNUKey)
	ProcessExecutableBuildIDGo  = string(semconv.ProcessExecutableBuildIDGoKey)
)

// ProfileFrameType is the location attribute naming the kind of code a
// frame runs; its values follow.
const ProfileFrameType = string(semconv.ProfileFrameTypeKey)

// Values of ProfileFrameType.
var (
	FrameTypeNative  = semconv.ProfileFrameTypeNative.Value.AsString()
	FrameTypeKernel  = semconv.ProfileFrameTypeKernel.Value.AsString()
	FrameTypeGo      = semconv.ProfileFrameTypeGo.Value.AsString()
	FrameTypeCPython = semconv.ProfileFrameTypeCpython.Value.AsString()
	FrameTypeJVM     = semconv.ProfileFrameTypeJVM.Value.AsString()
	FrameTypeV8JS    = semconv.ProfileFrameTypeV8JS.Value.AsString()
)

// FrameTypeBPF marks a JIT-compiled BPF program running in the kernel. The
// conventions have no value for it.
const FrameTypeBPF = "bpf"

// KernelMappingPath names the mapping of core kernel frames, as perf does;
// pprof never tries to open a file whose name starts with "[".
const KernelMappingPath = "[kernel.kallsyms]"

// KernelModuleMappingPath names the mapping of the frames of a kernel
// module, as perf does: "[ext4]".
func KernelModuleMappingPath(module string) string { return "[" + module + "]" }

// Attributes of a uprobe scope record. None is in the conventions.
const (
	ProbeID           = "probe.id"
	DurationNs        = "duration_ns"
	StartTimeUnixNano = "start_time_unix_nano"
	EndTimeUnixNano   = "end_time_unix_nano"
	IsMainThread      = "is_main_thread"
	NestedCalls       = "nested_calls"
)

// Sample and period types of the profiles bpfcol emits, as the OTel eBPF
// profiler names them: on-CPU samples counted with a cpu-time period, and
// time off CPU in nanoseconds.
const (
	SampleTypeSamples = "samples"
	SampleTypeOffCPU  = "off_cpu"
	PeriodTypeCPU     = "cpu"
	UnitCount         = "count"
	UnitNanoseconds   = "nanoseconds"
)

// OffCPUReason is the off-CPU sample attribute saying how the thread left
// the CPU; its values follow. The conventions have none.
const (
	OffCPUReason          = "off_cpu.reason"
	OffCPUReasonBlocked   = "blocked"   // it waited for something
	OffCPUReasonPreempted = "preempted" // it could have run on
)

// Labels of a pprof sample taken inside a probe scope: the ids of the
// scope's log record (its TraceId and SpanId, in hex), which pprof, having
// no links, carries as labels.
const (
	LabelTraceID = "trace_id"
	LabelSpanID  = "span_id"
)
