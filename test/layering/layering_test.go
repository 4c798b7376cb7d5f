// Package layering checks that data keeps flowing one way through the
// tree: BPF → aggregate → symbolize → pdata → consumer. Shared code under
// internal/ never reaches back up into a component, and the BPF loaders
// never depend on the symbolizer, nor the aggregator on the symbolizer, nor
// the profile builder on BPF, nor the resolver on the profile builder. Per-pid /proc paths are built in
// internal/process only.
package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/bpfcol/bpfcol"

// rule forbids packages under from to import packages under to.
type rule struct {
	from, to []string
	why      string
}

var rules = []rule{
	{
		from: []string{module + "/internal/"},
		to:   []string{module + "/receiver/", module + "/exporter/"},
		why:  "shared code must not depend on a component",
	},
	{
		from: []string{module + "/internal/bpf/"},
		to:   []string{module + "/internal/symbolize"},
		why:  "the BPF loaders sit below symbolization in the data flow",
	},
	{
		from: []string{module + "/receiver/ebpfprofreceiver/internal/profilebuilder/"},
		to:   []string{module + "/internal/bpf/"},
		why:  "the builder turns named stacks into pdata: the receiver hands it the scopes and probe names BPF gave",
	},
	{
		from: []string{module + "/receiver/ebpfprofreceiver/internal/aggregate/"},
		to:   []string{module + "/internal/symbolize"},
		why:  "the aggregator sits below symbolization in the data flow: the receiver hands it the binaries it reads",
	},
	{
		from: []string{module + "/receiver/ebpfprofreceiver/internal/resolve/"},
		to:   []string{module + "/receiver/ebpfprofreceiver/internal/profilebuilder"},
		why:  "resolving sits above building in the data flow: the builder takes resolve's named stacks",
	},
}

// imports lists every package of the module with its imports, test
// imports included: a test that reaches up the flow is a layering leak too.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"/...").Output()
	if err != nil {
		t.Fatalf("listing packages: %v", err)
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			pkgs[fields[0]] = fields[1:]
		}
	}
	return pkgs
}

func under(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(pkg+"/", p) || strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return false
}

func TestLayering(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: not the module root?", len(pkgs))
	}
	checked := map[string]int{}
	for pkg, imps := range pkgs {
		for _, r := range rules {
			if !under(pkg, r.from) {
				continue
			}
			checked[r.why]++
			for _, imp := range imps {
				if under(imp, r.to) {
					t.Errorf("%s imports %s: %s", pkg, imp, r.why)
				}
			}
		}
	}
	for _, r := range rules {
		if checked[r.why] == 0 {
			t.Errorf("rule %q matched no package: its prefixes are stale", r.why)
		}
	}
}

// TestRulesCatchALeak proves the check can fail: a made-up import that
// breaks each rule is reported.
func TestRulesCatchALeak(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{module + "/internal/process", module + "/receiver/uproberecv"},
		{module + "/internal/bpf/profiler", module + "/internal/symbolize/kernelsym"},
		{module + "/receiver/ebpfprofreceiver/internal/profilebuilder", module + "/internal/bpf/scopes"},
		{module + "/receiver/ebpfprofreceiver/internal/aggregate", module + "/internal/symbolize"},
		{module + "/receiver/ebpfprofreceiver/internal/resolve", module + "/receiver/ebpfprofreceiver/internal/profilebuilder"},
	} {
		broken := false
		for _, r := range rules {
			if under(tc.from, r.from) && under(tc.to, r.to) {
				broken = true
			}
		}
		if !broken {
			t.Errorf("%s importing %s is not caught", tc.from, tc.to)
		}
	}
}
