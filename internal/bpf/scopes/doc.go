// Package scopes is the one home of the state the two receivers share: the
// BPF map of open probe scopes. The scope programs of the uprobe receiver
// write each outermost scope to it while the scope is open (keyed by thread,
// or by goroutine for Go), and the sampler of the ebpfprof receiver reads it
// at every sample to link the sample to the scope's log record.
//
// Components declare their role when they are created, which the collector
// does for every component before it starts any: at start each receiver
// then knows whether its peer runs in the same process, and loads the
// shared map and its lookups only if so. The map itself is created by the
// first Acquire and closed after the last Release.
package scopes

import "sync"

// Role is what a component does with the map.
type Role int

const (
	// Writer opens and closes scopes: the uprobe receiver.
	Writer Role = iota
	// Reader links samples to open scopes: the ebpfprof receiver.
	Reader
	numRoles
)

// MaxEntries bounds the open scopes the map holds; beyond it the least
// recently used is evicted.
const MaxEntries = 16384

var registry struct {
	mu       sync.Mutex
	declared [numRoles]int
	refs     int
	m        *Map
	// probes are the probe names of each writer, by the first id of its
	// range: every writer's probes get ids of their own in the shared map.
	probes   map[uint32][]string
	nextBase uint32
}

// RegisterProbes gives a writer's probes, named in the order of their
// local ids, a range of ids in the shared map: base + local id. The
// returned unregister frees the names; calling it more than once is
// harmless.
func RegisterProbes(names []string) (base uint32, unregister func()) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.probes == nil {
		registry.probes = map[uint32][]string{}
	}
	base = registry.nextBase
	registry.nextBase += uint32(len(names))
	registry.probes[base] = append([]string(nil), names...)
	var once sync.Once
	return base, func() {
		once.Do(func() {
			registry.mu.Lock()
			delete(registry.probes, base)
			registry.mu.Unlock()
		})
	}
}

// ProbeName names the probe of a shared id, as its writer's log records
// do; false when no writer registered it (any more).
func ProbeName(id uint32) (string, bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for base, names := range registry.probes {
		if id >= base && id-base < uint32(len(names)) {
			return names[id-base], true
		}
	}
	return "", false
}

// Declare records that a component of role runs in this process. The
// returned release undoes it; calling it more than once is harmless.
func Declare(r Role) (release func()) {
	registry.mu.Lock()
	registry.declared[r]++
	registry.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			registry.mu.Lock()
			registry.declared[r]--
			registry.mu.Unlock()
		})
	}
}

// Declared reports whether a component of role was declared and not
// released.
func Declared(r Role) bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.declared[r] > 0
}

// Link is the identity of one outermost scope: the ids its log record
// carries, which the samples taken inside it link to.
type Link struct {
	TraceID [16]byte
	SpanID  [8]byte
	// ProbeID is the scope's probe, as RegisterProbes numbered it.
	ProbeID uint32
}
