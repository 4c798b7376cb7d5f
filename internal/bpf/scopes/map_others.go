//go:build !linux

package scopes

import (
	"errors"

	"github.com/cilium/ebpf"
)

// MapName is the name of the map in both collections' specs.
const MapName = "open_scopes"

// Map is one reference to the shared map of open scopes.
type Map struct{}

// Acquire fails: BPF maps need Linux.
func Acquire() (*Map, error) { return nil, errors.New("creating the map of open scopes: needs linux") }

// Map returns nil.
func (m *Map) Map() *ebpf.Map { return nil }

// Release does nothing.
func (m *Map) Release() error { return nil }

// Open reports false.
func Open() bool { return false }
