package process

import (
	"path/filepath"

	"github.com/bpfcol/bpfcol/internal/lru"
)

// Info is what telemetry says about a process: its executable and the
// container it runs in.
type Info struct {
	// ExePath is the executable's path as the process sees it; ExeName its
	// base name.
	ExePath, ExeName string
	// ContainerID is "" outside a container, or when the cgroup can no
	// longer be read.
	ContainerID string
}

// ReadInfo reads pid's Info from /proc. It fails only when the executable
// cannot be read, which mostly means the process is gone.
func ReadInfo(pid int) (Info, error) {
	exe, err := ExecutablePath(pid)
	if err != nil {
		return Info{}, err
	}
	info := Info{ExePath: exe, ExeName: filepath.Base(exe)}
	info.ContainerID, _ = ContainerID(pid)
	return info, nil
}

// InfoCache holds the Info of up to a fixed number of processes, the least
// recently used dropped first. Short-lived processes are often gone before
// their telemetry is read, so entries outlive the process until evicted or
// forgotten. Safe for concurrent use.
type InfoCache struct {
	entries *lru.Cache[int, Info]
	read    func(int) (Info, error)
}

// NewInfoCache returns a cache of at most maxEntries processes.
func NewInfoCache(maxEntries int) *InfoCache {
	return &InfoCache{entries: lru.New[int, Info](int64(maxEntries), nil), read: ReadInfo}
}

// Lookup returns pid's cached Info, or reads it from /proc.
func (c *InfoCache) Lookup(pid int) Info {
	if info, ok := c.entries.Get(pid); ok {
		return info
	}
	return c.Refresh(pid)
}

// Refresh reads pid's Info from /proc and caches it. A process already gone
// reads as the zero Info, which is not cached: its pid may be reused.
func (c *InfoCache) Refresh(pid int) Info {
	info, err := c.read(pid)
	if err != nil {
		return Info{}
	}
	c.entries.Add(pid, info)
	return info
}

// Put caches info for pid, when the caller knows it otherwise (from an
// exec event, for a process already gone).
func (c *InfoCache) Put(pid int, info Info) { c.entries.Add(pid, info) }

// Forget drops pid, whose image changed with exec or which exited.
func (c *InfoCache) Forget(pid int) { c.entries.Remove(pid) }

// Stats returns the size, hits and evictions of the cache.
func (c *InfoCache) Stats() lru.Stats { return c.entries.Stats() }
