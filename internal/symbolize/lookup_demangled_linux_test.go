//go:build linux

package symbolize

import (
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// TestMangledNeedlesAreInMangledNames checks the filter's one promise on
// real C++ symbols: for every mangled function name, each demangled form a
// user could copy yields needles that all occur in that mangled name. A
// broken rule would make a name unfindable; this finds it.
func TestMangledNeedlesAreInMangledNames(t *testing.T) {
	for _, path := range []string{"/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/node"} {
		t.Run(path, func(t *testing.T) {
			b := openWorkload(t, path)
			defer b.Close()
			syms, err := b.namedSymbols()
			if err != nil {
				t.Fatal(err)
			}
			// node has 140k C++ symbols: every 17th keeps the test short
			// and still covers thousands of shapes.
			step := 1
			if len(syms) > 20000 {
				step = 17
			}
			checked := 0
			for i := 0; i < len(syms); i += step {
				s := syms[i]
				if !strings.HasPrefix(s.name, "_Z") {
					continue
				}
				for _, opts := range [][]demangle.Option{nil, {demangle.LLVMStyle}, {demangle.NoParams}} {
					d, err := demangle.ToString(s.name, opts...)
					if err != nil {
						continue
					}
					for _, n := range mangledNeedles(d) {
						if !strings.Contains(s.name, n) {
							t.Errorf("%s demangles to %q, whose needle %q it lacks", s.name, d, n)
						}
					}
					checked++
				}
			}
			if checked < 1000 {
				t.Fatalf("only %d demangled forms checked", checked)
			}
			t.Logf("%d demangled forms checked", checked)
		})
	}
}

// TestLookupDemangledNode finds node's callback scope constructor and
// destructor by their demangled signatures, at the addresses of their
// mangled names, and lists every candidate of the ambiguous bare name.
func TestLookupDemangledNode(t *testing.T) {
	b := openWorkload(t, "/usr/bin/node")
	defer b.Close()
	const (
		ctor    = "node::InternalCallbackScope::InternalCallbackScope(node::Environment*, v8::Local<v8::Object>, node::async_context const&, int)"
		dtor    = "node::InternalCallbackScope::~InternalCallbackScope()"
		bare    = "node::InternalCallbackScope::InternalCallbackScope"
		ctorMan = "_ZN4node21InternalCallbackScopeC2EPNS_11EnvironmentEN2v85LocalINS3_6ObjectEEERKNS_13async_contextEi"
	)
	byDemangled, err := b.LookupFunction(ctor, "")
	if err != nil {
		t.Fatal(err)
	}
	byMangled, err := b.LookupFunction(ctorMan, "")
	if err != nil {
		t.Fatal(err)
	}
	if byDemangled.Start != byMangled.Start || byDemangled.Start == 0 {
		t.Fatalf("demangled %+v, mangled %+v", byDemangled, byMangled)
	}
	if _, err := b.LookupFunction(dtor, ""); err != nil {
		t.Fatal(err)
	}
	_, err = b.LookupFunction(bare, "")
	if err == nil {
		t.Fatal("the bare constructor name is ambiguous in node, found one")
	}
	msg := err.Error()
	for _, want := range []string{"several functions", "mangled name or its full demangled signature", ctorMan, ctor} {
		if !strings.Contains(msg, want) {
			t.Errorf("ambiguity error lacks %q: %s", want, msg)
		}
	}
	if strings.Count(msg, " at 0x") < 2 {
		t.Errorf("ambiguity error lists fewer than two addresses: %s", msg)
	}
}
