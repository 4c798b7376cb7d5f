//go:build !linux

package ebpfprofreceiver

// pageOutImage does nothing: the receiver runs on linux only.
func pageOutImage() (int64, error) { return 0, nil }
