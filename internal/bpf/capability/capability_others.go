//go:build !linux

package capability

import "errors"

var errNotLinux = errors.New("capabilities exist only on linux")

// Effective reports whether c is in the calling thread's effective set.
func Effective(Cap) (bool, error) { return false, errNotLinux }

// Missing returns those of caps that are not effective.
func Missing(caps ...Cap) ([]Cap, error) { return caps, errNotLinux }
