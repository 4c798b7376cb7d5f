package docs

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"

	"github.com/bpfcol/bpfcol/exporter/pprofexporter"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// allowedCase is one value an Allowed cell admits (valid) or excludes.
type allowedCase struct {
	value any
	valid bool
}

// proseAllowed gives, for the Allowed cells written in words, values they
// admit and values they exclude, by table and field. A cell neither parsed
// by allowedCases nor listed here fails the test: a new row needs its
// check.
var proseAllowed = map[string]map[string]struct {
	cell          string
	valid, refuse []any
}{
	"ebpfprof": {
		"symbolizer.debuginfod.urls": {"http(s) URLs",
			[]any{[]any{"http://debuginfod.example:8002"}, []any{"https://debuginfod.example/"}},
			[]any{[]any{"ftp://debuginfod.example/"}, []any{"http://"}, []any{"debuginfod.example"}}},
		"symbolizer.cache_dir": {"absolute path to a directory owned by the user running bpfcol, not writable by group or others",
			[]any{"/var/cache/bpfcol"}, []any{"var/cache/bpfcol"}},
		"symbolizer.debug_directories": {"absolute paths",
			[]any{[]any{"/srv/debug", "/opt/debug"}}, []any{[]any{"srv/debug"}}},
		"interpreters": {"`cpython`, `hotspot`, `v8`",
			[]any{[]any{"cpython"}, []any{"hotspot"}, []any{"v8"}, []any{"cpython", "hotspot", "v8"}, []any{}},
			[]any{[]any{"ruby"}, []any{"jvm"}, []any{"cpython", "cpython"}, []any{"hotspot", "hotspot"}, []any{"v8", "v8"}}},
	},
	"uprobe": {
		"probes[].id": {"`[A-Za-z0-9_.:-]+`, unique",
			[]any{"dns_lookup", "a.b:c-D_9"}, []any{"dns lookup", "dns/lookup", "é"}},
		"probes[].file_match": {"RE2 regex",
			[]any{`/libc\.so\.6$`, `^/usr/(s)?bin/[^/]+$`}, []any{`(`, `a(?=b)`}},
		"probes[].binary": {"clean absolute path",
			[]any{"/usr/bin/true"}, []any{"usr/bin/true", "/usr/bin/../bin/true", "/usr/bin/"}},
		"probes[].entry": {"symbol, `symbol+0xoff` or `symbol+decimal`, `symbol@VERSION` or `symbol@@VERSION` (optionally followed by the offset), `usdt:provider:name`; no spaces outside a demangled C++ name",
			[]any{"getaddrinfo", "getaddrinfo+0x10", "getaddrinfo+16", "getaddrinfo@GLIBC_2.2.5", "getaddrinfo@@GLIBC_2.2.5+0x4",
				"usdt:python:function__entry", "node::InternalCallbackScope::~InternalCallbackScope()"},
			[]any{"get addrinfo", "usdt:python", "usdt:a:b:c"}},
		"probes[].exit": {"`return`, a symbol (optionally versioned, no offset) or `usdt:provider:name`",
			[]any{"return", "freeaddrinfo", "freeaddrinfo@GLIBC_2.2.5", "usdt:python:function__return"},
			[]any{"freeaddrinfo+0x4", "free addrinfo"}},
		"probes[].min_duration": {"≥ 0, with a unit (`500us`, `50ms`); a bare number other than `0` is refused, as for every duration",
			[]any{0, "500us", "50ms"}, []any{"-1ms", 5}},
		"probes[].pids": {"process ids, 1 to `/proc/sys/kernel/pid_max` − 1",
			[]any{[]any{1}, []any{pidMax() - 1}}, []any{[]any{0}, []any{-4}, []any{pidMax()}}},
		"probes[].main_thread_only": {"bool", []any{true, false}, []any{"sometimes"}},
	},
	"pprof": {
		"directory": {"path", []any{"out/profiles", "/var/lib/bpfcol/profiles"}, []any{""}},
	},
}

// pidMax reads the kernel's pid_max, as the uprobe receiver does.
func pidMax() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 4194304
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 4194304
	}
	return n
}

var (
	reRange   = regexp.MustCompile(`^(.+?) to (.+?)( probes)?( \(0: the default\))?$`)
	reAtLeast = regexp.MustCompile(`^(?:bytes )?≥ (.+?)( \(0: the default\))?$`)
	reZeroOr  = regexp.MustCompile(`^0, or (.+) or more$`)
	reOpenOne = regexp.MustCompile(`^\(0, 1\]$`)
)

// allowedCases turns an Allowed cell of the field of type typ into values
// it admits and values it excludes: a range ("1 to 1000", "100ms to 10m",
// "1 MiB to 128 MiB", with "(0: the default)" admitting 0 as well), a
// bound ("≥ 1", "bytes ≥ 1 MiB"), "0, or X or more", "(0, 1]", or a list
// of `values`. ok is false for a cell in words.
func allowedCases(cell string, typ reflect.Type) (cases []allowedCase, ok bool) {
	add := func(v any, valid bool) { cases = append(cases, allowedCase{v, valid}) }
	switch {
	case reRange.MatchString(cell):
		m := reRange.FindStringSubmatch(cell)
		lo, okLo := parseBound(m[1], typ)
		hi, okHi := parseBound(m[2], typ)
		if !okLo || !okHi || m[3] != "" {
			return nil, false
		}
		add(encode(lo, typ), true)
		add(encode(hi, typ), true)
		if !(m[4] != "" && lo == 1) {
			add(encode(lo-1, typ), false)
		}
		add(encode(hi+1, typ), false)
		if m[4] != "" {
			add(encode(0, typ), true)
		}
		return cases, true
	case reAtLeast.MatchString(cell):
		m := reAtLeast.FindStringSubmatch(cell)
		lo, ok := parseBound(m[1], typ)
		if !ok {
			return nil, false
		}
		add(encode(lo, typ), true)
		add(encode(lo*3+1, typ), true)
		if !(m[2] != "" && lo == 1) {
			add(encode(lo-1, typ), false)
		}
		if m[2] != "" {
			add(encode(0, typ), true)
		}
		return cases, true
	case reZeroOr.MatchString(cell):
		lo, ok := parseBound(reZeroOr.FindStringSubmatch(cell)[1], typ)
		if !ok {
			return nil, false
		}
		add(encode(0, typ), true)
		add(encode(lo, typ), true)
		add(encode(lo-1, typ), false)
		return cases, true
	case reOpenOne.MatchString(cell) && typ.Kind() == reflect.Float64:
		return []allowedCase{{1.0, true}, {0.5, true}, {1e-6, true}, {0.0, false}, {-0.5, false}, {1.0001, false}}, true
	}
	// A list of values: `a`, `b`.
	spans := codeSpans(cell)
	if len(spans) == 0 || typ.Kind() != reflect.String {
		return nil, false
	}
	var rebuilt []string
	for _, s := range spans {
		rebuilt = append(rebuilt, "`"+s+"`")
		add(s, true)
	}
	if strings.Join(rebuilt, ", ") != cell {
		return nil, false
	}
	add("none_of_"+strings.Join(spans, "_"), false)
	return cases, true
}

// parseBound parses one end of a range as the field's type: an integer, a
// size ("8 MiB") or a duration ("100ms", "0").
func parseBound(s string, typ reflect.Type) (int64, bool) {
	if typ == reflect.TypeFor[time.Duration]() {
		if s == "0" {
			return 0, true
		}
		d, err := time.ParseDuration(s)
		return int64(d), err == nil
	}
	switch typ.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
	default:
		return 0, false
	}
	num, unit, sized := strings.Cut(s, " ")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, false
	}
	if sized {
		shift, ok := map[string]uint{"KiB": 10, "MiB": 20, "GiB": 30}[unit]
		if !ok {
			return 0, false
		}
		n <<= shift
	}
	return n, true
}

// encode writes n as a config file would give it for the type: a
// duration as a string with its unit.
func encode(n int64, typ reflect.Type) any {
	if typ == reflect.TypeFor[time.Duration]() {
		return time.Duration(n).String()
	}
	return n
}

// validates decodes conf over f's default config and validates it as the
// collector does (every field's own Validate too).
func validates(f factory, conf map[string]any) error {
	cfg := f.CreateDefaultConfig()
	if err := confmap.NewFromStringMap(conf).Unmarshal(cfg); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return confmap.Validate(cfg)
}

// baseConf is a config each table's Allowed values are tried in: the
// default config, and for the uprobe receiver one probe (which it
// requires).
func baseConf(typ string) map[string]any {
	if typ != "uprobe" {
		return map[string]any{}
	}
	return map[string]any{"probes": []any{map[string]any{"id": "p", "binary": "/usr/bin/true", "entry": "main"}}}
}

// withValue returns base with path set to v; a "list[]." path sets the
// field of the list's first element, keeping the element's other fields.
func withValue(base map[string]any, path string, v any) map[string]any {
	out := maps.Clone(base)
	head, rest, more := strings.Cut(path, ".")
	if !more {
		out[head] = v
		return out
	}
	if list, ok := strings.CutSuffix(head, "[]"); ok {
		var first map[string]any
		if l, ok := out[list].([]any); ok && len(l) > 0 {
			first, _ = l[0].(map[string]any)
		}
		if first == nil {
			first = map[string]any{}
		}
		elem := withValue(first, rest, v)
		// Only one of a probe's file_match and binary.
		if rest == "file_match" {
			delete(elem, "binary")
		}
		// A USDT entry needs a USDT exit, and a USDT exit an entry.
		if s, ok := v.(string); ok && strings.HasPrefix(s, "usdt:") {
			switch rest {
			case "entry":
				elem["exit"] = "usdt:p:done"
			case "exit":
				elem["entry"] = "usdt:p:begin"
			}
		}
		out[list] = []any{elem}
		return out
	}
	sub, _ := out[head].(map[string]any)
	if sub == nil {
		sub = map[string]any{}
	}
	out[head] = withValue(sub, rest, v)
	return out
}

// TestREADMEAllowedValues reads each setting's Allowed cell in README.md's
// configuration tables and tries values it admits and values it excludes
// through the component's decoding and Validate: each admitted value must
// be accepted and each excluded one refused. Cells in words have their
// values in proseAllowed; a cell with no check fails the test.
func TestREADMEAllowedValues(t *testing.T) {
	lines := readme(t)
	for _, tc := range []configTable{
		{"`ebpfprof` receiver configuration", ebpfprofreceiver.NewFactory()},
		{"`uprobe` receiver configuration", uproberecv.NewFactory()},
		{"`pprof` exporter configuration", pprofexporter.NewFactory()},
	} {
		typ := tc.factory.Type().String()
		t.Run(typ, func(t *testing.T) {
			// No debuginfod environment leaks into the checks.
			for _, k := range []string{"DEBUGINFOD_URLS", "DEBUGINFOD_TIMEOUT", "DEBUGINFOD_MAXSIZE"} {
				t.Setenv(k, "")
			}
			base := baseConf(typ)
			if err := validates(tc.factory, base); err != nil {
				t.Fatalf("the base config does not validate: %v", err)
			}
			checked := 0
			for _, row := range tableRows(t, section(t, lines, tc.heading), "Field") {
				spans := codeSpans(row[0])
				if len(spans) != 1 || len(row) < 4 {
					continue // TestREADMEConfigTables reports it
				}
				path, cell := docPath(spans[0]), row[2]
				var field reflect.Value
				var err error
				if strings.Contains(path, "[]") {
					field, err = elemField(tc.factory, path)
				} else {
					field, err = fieldAt(reflect.ValueOf(tc.factory.CreateDefaultConfig()), path)
				}
				if err != nil {
					t.Errorf("%s: %v", spans[0], err)
					continue
				}
				cases, ok := allowedCases(cell, field.Type())
				if prose, listed := proseAllowed[typ][path]; listed {
					if prose.cell != cell {
						t.Errorf("%s: Allowed reads %q, the test's values are for %q: update proseAllowed", spans[0], cell, prose.cell)
						continue
					}
					cases = nil
					for _, v := range prose.valid {
						cases = append(cases, allowedCase{v, true})
					}
					for _, v := range prose.refuse {
						cases = append(cases, allowedCase{v, false})
					}
				} else if !ok {
					if cell == "" && field.Kind() == reflect.Bool {
						continue // a bool: the decoder admits nothing else
					}
					if path == "probes" {
						cases = probeCounts(cell)
					}
					if cases == nil {
						t.Errorf("%s: no check for the Allowed cell %q: give its values in proseAllowed", spans[0], cell)
						continue
					}
				}
				for _, c := range cases {
					err := validates(tc.factory, withValue(base, path, c.value))
					switch {
					case c.valid && err != nil:
						t.Errorf("%s: README.md allows %v (%q), the config refuses it: %v", spans[0], c.value, cell, err)
					case !c.valid && err == nil:
						t.Errorf("%s: README.md does not allow %v (%q), the config accepts it", spans[0], c.value, cell)
					}
				}
				checked++
			}
			t.Logf("%d Allowed cells checked", checked)
			if checked == 0 {
				t.Error("no Allowed cell was checked")
			}
		})
	}
}

// probeCounts reads "1 to N probes": N probes are accepted, none and N+1
// refused.
func probeCounts(cell string) []allowedCase {
	m := regexp.MustCompile(`^1 to (\d+) probes$`).FindStringSubmatch(cell)
	if m == nil {
		return nil
	}
	n, _ := strconv.Atoi(m[1])
	probes := func(k int) []any {
		out := make([]any, k)
		for i := range out {
			out[i] = map[string]any{"id": "p" + strconv.Itoa(i), "binary": "/usr/bin/true", "entry": "main"}
		}
		return out
	}
	return []allowedCase{{probes(1), true}, {probes(n), true}, {probes(0), false}, {probes(n + 1), false}}
}

// elemField returns the field a "list[].field" path names in a list
// element's zero value.
func elemField(f factory, path string) (reflect.Value, error) {
	list, rest, _ := strings.Cut(path, "[].")
	v, err := fieldAt(reflect.ValueOf(f.CreateDefaultConfig()), list)
	if err != nil {
		return v, err
	}
	return fieldAt(reflect.New(v.Type().Elem()), rest)
}
