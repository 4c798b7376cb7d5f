// Package unwind recovers the caller that a frame-pointer stack walk loses when
// a sample lands in a function that has no frame of its own at that instruction
// (a frameless leaf, a prologue before "mov rbp, rsp", or an epilogue after
// "pop rbp"). It decides from the function's x86-64 machine code whether the
// return address into the caller is at [SP] or [SP+8], the two stack words the
// BPF sampler captures.
package unwind
