//go:build !linux

package ksymprog

import "errors"

var errNotLinux = errors.New("the BPF kernel symbol formatter runs only on linux")

// Formatter is the loaded kernel address formatter. It exists only on linux.
type Formatter struct{}

// CheckSupport reports that the formatter needs linux.
func CheckSupport() error { return errNotLinux }

// Load fails: the formatter needs linux.
func Load() (*Formatter, error) { return nil, errNotLinux }

// Format fails: the formatter needs linux.
func (*Formatter) Format([]uint64, []bool, func(int, []byte, bool)) error { return errNotLinux }

// Close does nothing.
func (*Formatter) Close() error { return nil }
