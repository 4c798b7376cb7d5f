package unwind

import "testing"

// asm is a hand-assembled function: each entry is one instruction's bytes and
// the answer expected before it executes (-1: ok=false).
type asm []struct {
	code []byte
	want int
	text string
}

const none = -1

func checkAsm(t *testing.T, name string, fn asm) {
	t.Helper()
	var code []byte
	for _, in := range fn {
		code = append(code, in.code...)
	}
	const base = 0x401000
	off := uint64(0)
	for _, in := range fn {
		slot, ok := ReturnAddressSlot(code, base, base+off)
		got := slot
		if !ok {
			got = none
		}
		if got != in.want {
			t.Errorf("%s+%#x %s: got (%d,%v), want %d", name, off, in.text, slot, ok, in.want)
		}
		off += uint64(len(in.code))
	}
}

func TestHandAssembled(t *testing.T) {
	cases := map[string]asm{
		"gcc frame with endbr64 and leave": {
			{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, 0, "endbr64"},
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xe5}, 8, "mov rbp,rsp"},
			{[]byte{0x48, 0x83, 0xec, 0x20}, none, "sub rsp,0x20"},
			{[]byte{0xe8, 0, 0, 0, 0}, none, "call next"}, // pushes: PIC-thunk idiom
			{[]byte{0x58}, none, "pop rax"},
			{[]byte{0xc9}, none, "leave"},
			{[]byte{0x90}, 0, "nop"},
			{[]byte{0xc3}, 0, "ret"},
		},
		"frameless with callee-saved pushes": {
			{[]byte{0x53}, 0, "push rbx"},
			{[]byte{0x41, 0x54}, 8, "push r12"},
			{[]byte{0x48, 0x83, 0xec, 0x08}, none, "sub rsp,8"},
			{[]byte{0x48, 0x83, 0xc4, 0x08}, none, "add rsp,8"},
			{[]byte{0x41, 0x5c}, none, "pop r12"},
			{[]byte{0x5b}, 8, "pop rbx"},
			{[]byte{0xc3}, 0, "ret"},
		},
		"lea rsp adjustments": {
			{[]byte{0x48, 0x8d, 0x64, 0x24, 0xf8}, 0, "lea rsp,[rsp-8]"},
			{[]byte{0x48, 0x8d, 0x64, 0x24, 0x08}, 8, "lea rsp,[rsp+8]"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Shrink-wrapped: the early exit returns before the prologue, and
		// the block after the first ret is only reached by the je.
		"early return": {
			{[]byte{0x48, 0x85, 0xff}, 0, "test rdi,rdi"},
			{[]byte{0x74, 0x01}, 0, "je +1"},
			{[]byte{0xc3}, 0, "ret"},
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xe5}, 8, "mov rbp,rsp"},
			{[]byte{0x5d}, none, "pop rbp"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Go: stack check, frame, body ending in a call that does not
		// return, then the morestack tail entered only by the jbe.
		"go prologue and morestack tail": {
			{[]byte{0x49, 0x3b, 0x66, 0x10}, 0, "cmp rsp,[r14+0x10]"},
			{[]byte{0x76, 0x0d}, 0, "jbe tail"},
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xe5}, 8, "mov rbp,rsp"},
			{[]byte{0x48, 0x83, 0xec, 0x10}, none, "sub rsp,0x10"},
			{[]byte{0xe8, 0x10, 0x00, 0x00, 0x00}, none, "call runtime.throw"},
			// tail:
			{[]byte{0x48, 0x89, 0x44, 0x24, 0x08}, 0, "mov [rsp+8],rax"},
			{[]byte{0xe8, 0x00, 0x10, 0x00, 0x00}, 0, "call runtime.morestack_noctxt"},
			{[]byte{0xeb, 0xe1}, 0, "jmp start"},
		},
		"go large frame check": {
			{[]byte{0x4c, 0x8d, 0xa4, 0x24, 0x00, 0xfe, 0xff, 0xff}, 0, "lea r12,[rsp-0x200]"},
			{[]byte{0x4d, 0x3b, 0x66, 0x10}, 0, "cmp r12,[r14+0x10]"},
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xe5}, 8, "mov rbp,rsp"},
			{[]byte{0x5d}, none, "pop rbp"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Realignment makes rsp unknown until leave restores it from rbp.
		"realigned frame": {
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xe5}, 8, "mov rbp,rsp"},
			{[]byte{0x48, 0x83, 0xe4, 0xc0}, none, "and rsp,-64"},
			{[]byte{0x48, 0x29, 0xc4}, none, "sub rsp,rax"},
			{[]byte{0xc9}, none, "leave"},
			{[]byte{0x90}, 0, "nop"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// rbp reloaded from data then popped: only the matching pop
		// restores the caller's rbp.
		"rbp as a general register": {
			{[]byte{0x55}, 0, "push rbp"},
			{[]byte{0x48, 0x89, 0xfd}, 8, "mov rbp,rdi"},
			{[]byte{0x5d}, none, "pop rbp"},
			{[]byte{0x90}, 0, "nop"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Paths that disagree on the depth give no answer.
		"conflicting paths": {
			{[]byte{0x48, 0x85, 0xff}, 0, "test rdi,rdi"},
			{[]byte{0x74, 0x01}, 0, "je +1"},
			{[]byte{0x53}, 0, "push rbx"},
			{[]byte{0x90}, none, "nop (depth 0 or 8)"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Stack switching code answers nothing except at ret.
		"stack switch": {
			{[]byte{0x48, 0x89, 0xc4}, none, "mov rsp,rax"},
			{[]byte{0x90}, none, "nop"},
			{[]byte{0xc3}, 0, "ret"},
		},
		// Undecodable bytes end the path; the ret rule still applies.
		"jump table target": {
			{[]byte{0xff, 0xe0}, 0, "jmp rax"},
			{[]byte{0x90}, none, "nop (only via table)"},
			{[]byte{0xc3}, 0, "ret"},
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) { checkAsm(t, name, fn) })
	}
}

func TestOutOfRange(t *testing.T) {
	code := []byte{0x90, 0xc3}
	for _, pc := range []uint64{0xfff, 0x1002, 0x2000} {
		if s, ok := ReturnAddressSlot(code, 0x1000, pc); ok {
			t.Errorf("pc %#x outside the code: got (%d,true)", pc, s)
		}
	}
	if _, ok := ReturnAddressSlot(nil, 0x1000, 0x1000); ok {
		t.Errorf("empty code: got ok")
	}
}

func BenchmarkAnalyzeGoPrologue(b *testing.B) {
	code := []byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x0d, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10,
		0xe8, 0x10, 0x00, 0x00, 0x00, 0x48, 0x89, 0x44, 0x24, 0x08, 0xe8, 0x00, 0x10, 0x00, 0x00, 0xeb, 0xe1}
	for b.Loop() {
		ReturnAddressSlot(code, 0x401000, 0x401006)
	}
}
