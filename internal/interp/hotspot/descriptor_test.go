package hotspot

import "testing"

func TestMethodName(t *testing.T) {
	for _, c := range []struct{ klass, name, desc, want string }{
		{"JavaChain", "chainLeaf", "(J)J", "long JavaChain.chainLeaf(long)"},
		{"JavaChain", "main", "([Ljava/lang/String;)V", "void JavaChain.main(java.lang.String[])"},
		{"java/util/HashMap", "putVal", "(ILjava/lang/Object;Ljava/lang/Object;ZZ)Ljava/lang/Object;",
			"java.lang.Object java.util.HashMap.putVal(int, java.lang.Object, java.lang.Object, boolean, boolean)"},
		{"a/B$C", "<init>", "()V", "void a.B$C.<init>()"},
		{"X", "f", "([[IBCDFS[[[Lp/Q;)[[J", "long[][] X.f(int[][], byte, char, double, float, short, p.Q[][][])"},
	} {
		got, err := methodName(c.klass, c.name, c.desc)
		if err != nil || got != c.want {
			t.Errorf("%s.%s%s: %q, %v; want %q", c.klass, c.name, c.desc, got, err, c.want)
		}
	}
	for _, desc := range []string{"", "()", "(J", "J)J", "(V)V", "()[V", "(L;)V", "(Ljava/lang/String)V", "()JJ", "(Q)V", "()" + string(make([]byte, 300))} {
		if got, err := methodName("X", "f", desc); err == nil {
			t.Errorf("descriptor %q rendered as %q, want an error", desc, got)
		}
	}
}
