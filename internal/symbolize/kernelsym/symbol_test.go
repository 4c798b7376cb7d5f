package kernelsym

import "testing"

// The inputs follow lib/vsprintf.c's %pS/%pB output and kernel/bpf/core.c's
// bpf_get_prog_name.
func TestParseKernelText(t *testing.T) {
	cases := []struct {
		text      string
		truncated bool
		want      Symbol
	}{
		{"vfs_read+0x1c/0x360", false, Symbol{Name: "vfs_read", Offset: 0x1c, Size: 0x360, OK: true}},
		{"__pfx_vfs_read+0x10/0x10", false, Symbol{Name: "__pfx_vfs_read", Offset: 0x10, Size: 0x10, OK: true}},
		{"foo.isra.0+0x0/0x40 [my_mod]", false, Symbol{Name: "foo.isra.0", Size: 0x40, Module: "my_mod", OK: true}},
		{"bpf_prog_59f4a931744dcdc6_handler+0x1/0x14", false, Symbol{Name: "bpf_prog_59f4a931744dcdc6_handler", Offset: 1, Size: 0x14, IsBPFProg: true, OK: true}},
		{"bpf_prog_59f4a931744dcdc6+0x8/0x14", false, Symbol{Name: "bpf_prog_59f4a931744dcdc6", Offset: 8, Size: 0x14, IsBPFProg: true, OK: true}},
		{"bpf_prog_run_generic_xdp+0x8/0x400", false, Symbol{Name: "bpf_prog_run_generic_xdp", Offset: 8, Size: 0x400, OK: true}},
		{"bpf_prog_load+0x8/0x400", false, Symbol{Name: "bpf_prog_load", Offset: 8, Size: 0x400, OK: true}},
		{"0xffffffffc0201000", false, Symbol{}},
		{"0x10", false, Symbol{}},
		{"", false, Symbol{}},
		{"name+0xzz/0x10", false, Symbol{}},
		{"a_very_long_name_cut_by_the_sl", true, Symbol{Name: "a_very_long_name_cut_by_the_sl", Truncated: true, OK: true}},
		{"a_long_name+0x10/0x2", true, Symbol{Name: "a_long_name", Truncated: true, OK: true}},
	}
	for _, c := range cases {
		if got := parseKernelText([]byte(c.text), c.truncated); got != c.want {
			t.Errorf("parseKernelText(%q, %v) = %+v, want %+v", c.text, c.truncated, got, c.want)
		}
	}
}
