//go:build linux && (amd64 || arm64)

package profiler

import "testing"

// TestFMODEBacking pins FMODE_BACKING to the kernel releases that moved
// it: none before /proc/PID/maps showed the user's inode (6.8), bit 25
// until the fanotify bits took it (6.14), bit 24 since.
func TestFMODEBacking(t *testing.T) {
	for release, want := range map[string]uint32{
		"6.1.0-50-cloud-amd64": 0, "6.7.12": 0, "6.8.0-31-generic": 1 << 25, "6.12.48+deb13-amd64": 1 << 25,
		"6.13.1": 1 << 25, "6.14.0": 1 << 24, "6.18.44-fc-v782": 1 << 24, "7.0": 1 << 24, "": 0, "garbage": 0,
	} {
		if got := fmodeBacking(release); got != want {
			t.Errorf("fmodeBacking(%q) = %#x, want %#x", release, got, want)
		}
	}
}
