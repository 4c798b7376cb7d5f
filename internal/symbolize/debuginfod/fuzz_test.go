package debuginfod

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// check runs a StreamCheck over data delivered in chunks of chunk bytes
// (0: all at once) and returns its verdict.
func runCheck(t *testing.T, id string, data []byte, chunk int) (accepted bool, err error) {
	c, err := NewStreamCheck(id, bytes.NewReader(data), int64(len(data))+1)
	if err != nil {
		t.Fatal(err)
	}
	if chunk <= 0 {
		chunk = len(data)
	}
	for n := chunk; n < len(data); n += chunk {
		if err := c.Advance(int64(n)); err != nil {
			return false, err
		}
	}
	if err := c.Finish(int64(len(data))); err != nil {
		return false, err
	}
	return true, nil
}

// FuzzStreamCheck: the download check never panics, errors only with
// ErrInvalid or ErrTooLarge, reaches the same verdict however the bytes are split, and
// accepts only bytes that start with the ELF magic and hold the build-id.
func FuzzStreamCheck(f *testing.F) {
	e := buildELFs(f, 1)[0]
	f.Add(e.data, uint16(1))
	f.Add(e.data, uint16(4096))
	f.Add(e.data[:64], uint16(7))
	f.Add(make([]byte, 100), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		whole, werr := runCheck(t, e.id, data, 0)
		split, serr := runCheck(t, e.id, data, int(chunk))
		if whole != split {
			t.Fatalf("verdict depends on the chunking: whole %v (%v), chunks of %d %v (%v)", whole, werr, chunk, split, serr)
		}
		for _, err := range []error{werr, serr} {
			if err != nil && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error neither ErrInvalid nor ErrTooLarge: %v", err)
			}
		}
		want, _ := hex.DecodeString(e.id)
		if whole && (!bytes.HasPrefix(data, elfMagic) || !bytes.Contains(data, want)) {
			t.Fatal("accepted a body without the ELF magic or the build-id")
		}
	})
}

// TestStreamCheckAcceptsRealFiles: every real build checks out in any
// chunking, and a one-bit change of its build-id is caught.
func TestStreamCheckAcceptsRealFiles(t *testing.T) {
	for _, e := range buildELFs(t, 2) {
		for _, chunk := range []int{0, 1, 13, 4096} {
			if ok, err := runCheck(t, e.id, e.data, chunk); !ok {
				t.Errorf("%s in chunks of %d: %v", e.path, chunk, err)
			}
		}
		want, _ := hex.DecodeString(e.id)
		i := bytes.Index(e.data, want)
		bad := bytes.Clone(e.data)
		bad[i] ^= 1
		if ok, err := runCheck(t, e.id, bad, 0); ok || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s with a flipped build-id bit: accepted %v, %v", e.path, ok, err)
		}
	}
}
