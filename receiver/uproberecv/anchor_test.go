package uproberecv

import "testing"

func TestLiteralDir(t *testing.T) {
	for _, tc := range []struct {
		expr, dir string
	}{
		{`^/opt/app/bin/[^/]+$`, "/opt/app/bin"},
		{`^/usr/lib/x86_64-linux-gnu/libfoo\.so`, "/usr/lib/x86_64-linux-gnu"},
		{`^/opt/app/lib/libfoo\.so\.1$`, "/opt/app/lib"},
		{`^/opt/(?:a|b)/x`, "/opt"},
		{`^/opt/a(?:pp|rk)/lib/x`, "/opt"},
		{`^/x`, "/"},
		{`^/opt/app/`, "/opt/app"},
		{`/opt/app/bin/[^/]+$`, ""}, // not anchored
		{`(?i)^/opt/app/bin/x`, ""}, // case folded
		{`^(/opt/app/bin/x)`, ""},   // a group first
		{`^opt/app/x`, ""},          // relative
		{`^/opt//app/x`, ""},        // not a clean path
		{`^/opt/\.\./etc/x`, ""},    // not a clean path
		{`^/opt/../etc/x`, "/opt"},  // "." is any character
		{`(?m)^/opt/app/x`, ""},     // start of a line, not of the text
		{`^/opt/app/x|^/srv/y`, ""}, // alternation
		{`^/opt/[ab]pp/x`, "/opt"},  // literal up to the class
		{`^/opt/app/bin\x2fx`, "/opt/app/bin"},
		{`^\/opt\/app\/x`, "/opt/app"},
		{`^/opt/app/bin/x[`, ""}, // invalid
	} {
		dir, ok := literalDir(tc.expr)
		if dir != tc.dir || ok != (tc.dir != "") {
			t.Errorf("literalDir(%q) = %q, %v; want %q", tc.expr, dir, ok, tc.dir)
		}
	}
}
