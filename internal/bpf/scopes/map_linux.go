package scopes

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Sizes of the key and value of the map, as bpfcol_scopes.h lays them out.
const (
	keySize   = 16 // struct open_scope_key
	valueSize = 32 // struct scope_link
)

// MapName is the name of the map in both collections' specs: the name to
// pass it under in ebpf.CollectionOptions.MapReplacements.
const MapName = "open_scopes"

// Map is one reference to the shared map of open scopes.
type Map struct {
	m    *ebpf.Map
	once sync.Once
}

// Acquire returns a reference to the shared map, creating it if no
// reference is held.
func Acquire() (*Map, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.refs == 0 {
		m, err := ebpf.NewMap(&ebpf.MapSpec{
			Name:       MapName,
			Type:       ebpf.LRUHash,
			KeySize:    keySize,
			ValueSize:  valueSize,
			MaxEntries: MaxEntries,
		})
		if err != nil {
			return nil, fmt.Errorf("creating the map of open scopes: %w", err)
		}
		registry.m = &Map{m: m}
	}
	registry.refs++
	return &Map{m: registry.m.m}, nil
}

// Map returns the kernel map, to hand to a collection load. It stays valid
// until Release; a loaded collection holds its own clone.
func (m *Map) Map() *ebpf.Map { return m.m }

// Release drops the reference; the last one closes the map (programs that
// use it keep their own reference in the kernel). It is safe to call more
// than once.
func (m *Map) Release() error {
	var err error
	m.once.Do(func() {
		registry.mu.Lock()
		defer registry.mu.Unlock()
		if registry.refs--; registry.refs == 0 {
			err = registry.m.m.Close()
			registry.m = nil
		}
	})
	return err
}

// Open reports whether the shared map exists now: for tests that check it
// was dropped.
func Open() bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.refs > 0
}
