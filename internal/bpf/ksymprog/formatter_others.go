//go:build !linux || !(amd64 || arm64)

package ksymprog

import "errors"

var errNotLinux = errors.New("the BPF kernel symbol formatter runs only on linux on amd64 or arm64")

// Formatter is the loaded kernel address formatter. It exists only on linux on amd64 or arm64.
type Formatter struct{}

// CheckSupport reports that the formatter needs linux on amd64 or arm64.
func CheckSupport() error { return errNotLinux }

// Load fails: the formatter needs linux on amd64 or arm64.
func Load() (*Formatter, error) { return nil, errNotLinux }

// Format fails: the formatter needs linux on amd64 or arm64.
func (*Formatter) Format([]uint64, []bool, func(int, []byte, bool)) error { return errNotLinux }

// TextBounds fails: the formatter needs linux on amd64 or arm64.
func (*Formatter) TextBounds() (uint64, uint64, error) { return 0, 0, errNotLinux }

// Close does nothing.
func (*Formatter) Close() error { return nil }
