package e2e

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
)

func TestFrameIs(t *testing.T) {
	for _, c := range []struct {
		name, fn string
		want     bool
	}{
		{"crunch_leaf", "crunch_leaf", true},
		{"long Crunch.crunchLeaf(long)", "Crunch.crunchLeaf", true},
		{"void Crunch.main(java.lang.String[])", "Crunch.main", true},
		{"Crunch.crunchLeaf(long)", "Crunch.crunchLeaf", true},
		{"crunch_leaf", "leaf", false},
		{"main.main", "main", false},
		{"x_leaf(int)", "leaf", false},
		{"", "leaf", false},
	} {
		if got := frameIs(c.name, c.fn); got != c.want {
			t.Errorf("frameIs(%q, %q) = %v, want %v", c.name, c.fn, got, c.want)
		}
	}
}

func TestStackShares(t *testing.T) {
	native := func(names ...string) pprofiletest.Sample {
		s := pprofiletest.Sample{PID: 7, Count: 1, Names: names}
		for range names {
			s.Types = append(s.Types, "native")
		}
		return s
	}
	inKernel := native("leaf", "middle", "main", "_start", "do_syscall_64")
	inKernel.Types[4] = "kernel"
	w := profiledWorkload{pids: pidSet(7), chain: []string{"leaf", "middle", "main"}, eachFunction: true}
	got := w.shares([]pprofiletest.Sample{
		native("leaf", "middle", "main", "__libc_start_call_main", "__libc_start_main", "_start"), // complete, chain
		native("leaf", "x", "middle", "main", "start_thread", "clone3"),                           // complete, chain with a frame between
		native("leaf", "main"),                                                 // neither
		native("middle", "leaf", "main", "_start"),                             // complete, chain out of order
		{PID: 8, Count: 5, Names: []string{"leaf"}, Types: []string{"native"}}, // another process
		inKernel, // a kernel frame outermost: the user stack still reaches _start
	})
	if got.samples != 5 || got.complete != 80 || got.chain != 60 {
		t.Errorf("samples %d, complete %.0f%%, chain %.0f%%; want 5, 80%%, 60%%", got.samples, got.complete, got.chain)
	}
	if len(got.each) != 3 || got.each[0] != 100 || got.each[1] != 80 || got.each[2] != 100 {
		t.Errorf("each function: %v, want [100 80 100]", got.each)
	}
}
