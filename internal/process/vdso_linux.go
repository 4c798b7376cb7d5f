package process

import (
	"fmt"
	"os"
	"sync"
)

var vdso struct {
	once  sync.Once
	image []byte
	err   error
}

// VDSOImage returns the kernel's vDSO image, the whole [vdso] mapping as
// bpfcol itself maps it: every 64-bit process of the running kernel maps
// the same image (its symbols name their [vdso] frames, its .eh_frame
// unwinds them). It is read once; the caller must not modify it.
func VDSOImage() ([]byte, error) {
	vdso.once.Do(func() { vdso.image, vdso.err = readVDSO() })
	return vdso.image, vdso.err
}

func readVDSO() ([]byte, error) {
	maps, err := ReadMappings(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("reading the vDSO: %w", err)
	}
	for _, m := range maps {
		if m.Path != VDSOPath {
			continue
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, fmt.Errorf("reading the vDSO: %w", err)
		}
		defer mem.Close()
		image := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(image, int64(m.Start)); err != nil {
			return nil, fmt.Errorf("reading the vDSO: %w", err)
		}
		return image, nil
	}
	return nil, fmt.Errorf("reading the vDSO: no %s mapping", VDSOPath)
}
