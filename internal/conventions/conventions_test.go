package conventions

import "testing"

// TestWireNames pins the keys and values bpfcol writes: a newer semconv
// package that renamed one would change what backends and bpfcol's own
// pprof exporter read, so that must be a decision, not a side effect.
func TestWireNames(t *testing.T) {
	for got, want := range map[string]string{
		ProcessPID:                      "process.pid",
		ProcessExecutablePath:           "process.executable.path",
		ProcessExecutableName:           "process.executable.name",
		ContainerID:                     "container.id",
		ThreadID:                        "thread.id",
		ThreadName:                      "thread.name",
		ProcessExecutableBuildIDGNU:     "process.executable.build_id.gnu",
		ProcessExecutableBuildIDGo:      "process.executable.build_id.go",
		ProfileFrameType:                "profile.frame.type",
		FrameTypeNative:                 "native",
		FrameTypeKernel:                 "kernel",
		FrameTypeGo:                     "go",
		FrameTypeCPython:                "cpython",
		FrameTypeJVM:                    "jvm",
		FrameTypeV8JS:                   "v8js",
		KernelModuleMappingPath("ext4"): "[ext4]",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
