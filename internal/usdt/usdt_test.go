package usdt

import (
	"encoding/binary"
	"testing"
)

// TestParseDesc decodes a descriptor laid out as <sys/sdt.h> emits it, and
// rejects one without a name.
func TestParseDesc(t *testing.T) {
	desc := binary.LittleEndian.AppendUint64(nil, 0x1234)
	desc = binary.LittleEndian.AppendUint64(desc, 0x2000)
	desc = binary.LittleEndian.AppendUint64(desc, 0x4038)
	desc = append(desc, "prov\x00name\x008@%rdi\x00"...)
	p, err := parseDesc(desc, 8, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	want := parsedProbe{Probe: Probe{Provider: "prov", Name: "name", PC: 0x1234, Semaphore: 0x4038, Args: "8@%rdi"}, base: 0x2000}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	if _, err := parseDesc(desc[:24+5], 8, binary.LittleEndian); err == nil {
		t.Error("a descriptor without a name parsed")
	}
}
