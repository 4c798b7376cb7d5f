package ebpfprofreceiver

import (
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// TestVDSOFramesNamed profiles a program that spends its time reading the
// clock through the vDSO: its [vdso] frames are named (clock_gettime and
// the vDSO's own helpers), and the mapping carries the vDSO's build-id.
func TestVDSOFramesNamed(t *testing.T) {
	bin := testworkload.BuildC(t, "clockloop.c", "-O2", "-g")
	_, all := profileRun(t, bin, 4*time.Second)
	var named, unnamed, clock int
	names := map[string]int{}
	for _, frames := range workloadFrames(all, "[vdso]") {
		for _, f := range frames {
			if len(f.lines) == 0 || f.lines[0].function == "" || f.buildID == "" {
				unnamed++
				continue
			}
			named++
			names[f.lines[0].function]++
			if strings.Contains(f.lines[0].function, "clock_gettime") {
				clock++
			}
		}
	}
	t.Logf("[vdso] locations: %d named (with build-id), %d not; names %v", named, unnamed, names)
	if named+unnamed == 0 {
		t.Fatal("no [vdso] frame in the profiles: the workload's clock reads did not go through the vDSO")
	}
	if unnamed > 0 {
		t.Errorf("%d [vdso] locations without a name or build-id", unnamed)
	}
	if clock == 0 {
		t.Errorf("no [vdso] location named clock_gettime: %v", names)
	}
}
