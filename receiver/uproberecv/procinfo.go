package uproberecv

import (
	"path/filepath"
	"sync"

	"github.com/bpfcol/bpfcol/internal/process"
)

// maxProcessInfos bounds the per-process resource cache.
const maxProcessInfos = 8192

// processInfo is what a record's resource says about its process.
type processInfo struct {
	exePath     string
	exeName     string
	containerID string
}

// processInfos caches processInfo by pid. It is filled when discovery scans
// a process and lazily for records of processes it never scanned, and
// refreshed on exec. Short-lived processes are often gone before their
// records are read, so entries outlive the process until evicted.
type processInfos struct {
	mu      sync.Mutex
	entries map[int]processInfo
	order   []int // insertion order, for eviction
}

func newProcessInfos() *processInfos {
	return &processInfos{entries: map[int]processInfo{}}
}

// lookup returns the cached info or reads it from /proc.
func (p *processInfos) lookup(pid int) processInfo {
	p.mu.Lock()
	info, ok := p.entries[pid]
	p.mu.Unlock()
	if ok {
		return info
	}
	return p.refresh(pid)
}

// refresh reads the process's info from /proc and caches what it found.
func (p *processInfos) refresh(pid int) processInfo {
	var info processInfo
	if exe, err := process.ExecutablePath(pid); err == nil {
		info.exePath, info.exeName = exe, filepath.Base(exe)
	}
	info.containerID, _ = process.ContainerID(pid)
	if info.exePath == "" {
		// Gone already: do not cache emptiness under a pid that may be
		// reused.
		return info
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.entries[pid]; !ok {
		p.order = append(p.order, pid)
	}
	p.entries[pid] = info
	for len(p.entries) > maxProcessInfos && len(p.order) > 0 {
		delete(p.entries, p.order[0])
		p.order = p.order[1:]
	}
	return info
}

// forget drops pid, whose image changed with exec.
func (p *processInfos) forget(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.entries[pid]; !ok {
		return
	}
	delete(p.entries, pid)
	for i, q := range p.order {
		if q == pid {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}
