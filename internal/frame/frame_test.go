package frame

import (
	"testing"
)

// TestReturnAddressAdjustedOnce checks that a return address is looked up
// one byte lower, inside the call, and a PC as it is.
func TestReturnAddressAdjustedOnce(t *testing.T) {
	pc := AtPC(Native, 0x1000)
	if pc.Address != 0x1000 || pc.ReturnAddress || pc.Type != Native {
		t.Fatalf("AtPC: %+v", pc)
	}
	ret := AtReturnAddress(Kernel, 0x1000)
	if ret.Address != 0xfff || !ret.ReturnAddress || ret.Type != Kernel {
		t.Fatalf("AtReturnAddress: %+v, want address 0xfff", ret)
	}
	// A zero return address (a broken stack) does not wrap around.
	if z := AtReturnAddress(Native, 0); z.Address != 0 {
		t.Fatalf("AtReturnAddress(0) looked up at %#x", z.Address)
	}
}

// TestTypeValues checks the profile.frame.type values and which types run
// in the kernel.
func TestTypeValues(t *testing.T) {
	for _, tc := range []struct {
		t        Type
		value    string
		inKernel bool
	}{
		{Native, "native", false},
		{Go, "go", false},
		{Kernel, "kernel", true},
		{BPF, "bpf", true},
	} {
		if got := tc.t.String(); got != tc.value {
			t.Errorf("type %d is %q, want %q", tc.t, got, tc.value)
		}
		if got := tc.t.InKernel(); got != tc.inKernel {
			t.Errorf("%s: InKernel %v, want %v", tc.value, got, tc.inKernel)
		}
	}
	var zero Frame
	if zero.Type != Native {
		t.Errorf("the zero frame is %s, want native", zero.Type)
	}
}

// TestKernelMapping checks that the core kernel and each module get their
// own mapping, named as perf names them, and that the module is not taken
// for a source file.
func TestKernelMapping(t *testing.T) {
	if p := KernelMapping("").Path; p != "[kernel.kallsyms]" {
		t.Errorf("core kernel mapping %q", p)
	}
	if p := KernelMapping("ext4").Path; p != "[ext4]" {
		t.Errorf("module mapping %q, want [ext4]", p)
	}
	if a, b := KernelMapping("ext4"), KernelMapping("ext4"); *a != *b {
		t.Errorf("two mappings of one module differ: %+v, %+v", a, b)
	}
}

// TestName checks that a frame is named after its physical function, the
// last line, whatever was inlined into it.
func TestName(t *testing.T) {
	f := Frame{Lines: []Line{
		{Name: "inlined()", File: "a.cc", Line: 3},
		{Name: "ns::outer(int)", SystemName: "_ZN2ns5outerEi", File: "a.cc", Line: 9},
	}}
	if got := f.Name(); got != "ns::outer(int)" {
		t.Errorf("Name() = %q, want the demangled physical function", got)
	}
	if got := (&Frame{}).Name(); got != "" {
		t.Errorf("unnamed frame: Name() = %q", got)
	}
}
