package docs

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"

	"github.com/bpfcol/bpfcol/exporter/pprofexporter"
	"github.com/bpfcol/bpfcol/internal/probesite"
	"github.com/bpfcol/bpfcol/internal/symbolize"
	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver"
	"github.com/bpfcol/bpfcol/receiver/uproberecv"
)

// configPaths lists the settings of a config type as the README's tables
// name them, with "." between levels: the leaves, and a list of structs
// itself ("probes") as well as its elements' fields ("probes[].id").
func configPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var paths []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]():
			paths = append(paths, configPaths(ft, path+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			paths = append(paths, path)
			paths = append(paths, configPaths(ft.Elem(), path+"[].")...)
		default:
			paths = append(paths, path)
		}
	}
	return paths
}

// docPath turns a table's field name into configPaths' form.
func docPath(s string) string { return strings.ReplaceAll(s, "::", ".") }

// confAt builds the config map that sets path to v; a "list[]." step sets
// the first element of the list.
func confAt(path string, v any) map[string]any {
	head, rest, more := strings.Cut(path, ".")
	if !more {
		return map[string]any{head: v}
	}
	if list, ok := strings.CutSuffix(head, "[]"); ok {
		return map[string]any{list: []any{confAt(rest, v)}}
	}
	return map[string]any{head: confAt(rest, v)}
}

// fieldAt returns the field at path in the config v points to.
func fieldAt(v reflect.Value, path string) (reflect.Value, error) {
	for step := range strings.SplitSeq(path, ".") {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			v = v.Elem()
		}
		name, isList := strings.CutSuffix(step, "[]")
		found := false
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("mapstructure"), ","); tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return v, fmt.Errorf("%s: no field %s", path, name)
		}
		if isList {
			if v.Len() == 0 {
				return v, fmt.Errorf("%s: %s is empty", path, name)
			}
			v = v.Index(0)
		}
	}
	return v, nil
}

// docDefault parses a table's default cell when it states one value: a
// single code span (decoded as YAML, as a config file would be) or a size
// such as "32 MiB". ok is false for a cell in words ("none", "all") or an
// environment variable.
func docDefault(cell string) (v any, ok bool) {
	if spans := codeSpans(cell); len(spans) == 1 && cell == "`"+spans[0]+"`" {
		if strings.HasPrefix(spans[0], "$") {
			return nil, false // the environment's value
		}
		if err := yaml.Unmarshal([]byte(spans[0]), &v); err != nil {
			return nil, false
		}
		return v, true
	}
	num, unit, found := strings.Cut(cell, " ")
	shift := map[string]uint{"KiB": 10, "MiB": 20, "GiB": 30}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !found || shift == 0 || err != nil {
		return nil, false
	}
	return n << shift, true
}

// zeroMeans are the fields whose default config value is zero and whose
// default the code applies later: the value the README must state.
var zeroMeans = map[string]map[string]any{
	"ebpfprof": {"symbolizer.cache_max_size": int64(symbolize.DefaultCacheMaxSize)},
	"uprobe":   {"probes[].exit": probesite.ExitReturn},
}

// configTable is one README table of a component's settings.
type configTable struct {
	heading string
	factory interface {
		Type() component.Type
		CreateDefaultConfig() component.Config
	}
}

// TestREADMEConfigTables checks each component's settings table in
// README.md against its Config: every field has a row and every row is a
// field, a default stated as one value is the one createDefaultConfig
// gives (or the code applies to zero, zeroMeans), and a default in words
// is what its check in proseDefaults finds.
func TestREADMEConfigTables(t *testing.T) {
	lines := readme(t)
	for _, tc := range []configTable{
		{"`ebpfprof` receiver configuration", ebpfprofreceiver.NewFactory()},
		{"`uprobe` receiver configuration", uproberecv.NewFactory()},
		{"`pprof` exporter configuration", pprofexporter.NewFactory()},
	} {
		typ := tc.factory.Type().String()
		t.Run(typ, func(t *testing.T) {
			rows := tableRows(t, section(t, lines, tc.heading), "Field")
			want := configPaths(reflect.TypeOf(tc.factory.CreateDefaultConfig()), "")
			var documented []string
			checkedDefaults := 0
			for _, row := range rows {
				spans := codeSpans(row[0])
				if len(spans) != 1 || len(row) < 4 {
					t.Errorf("row %q: want one `field` and Default, Allowed, Meaning cells", row)
					continue
				}
				path := docPath(spans[0])
				documented = append(documented, path)
				if !slices.Contains(want, path) {
					t.Errorf("README.md documents %s, which the %s Config does not have", spans[0], typ)
					continue
				}
				if _, ok := docDefault(row[1]); !ok {
					if err := checkProseDefault(tc.factory, typ, path, row[1]); err != nil {
						t.Errorf("%s: %v", spans[0], err)
					} else {
						checkedDefaults++
					}
					continue
				}
				if err := checkDefault(tc.factory, path, row[1], zeroMeans[typ][path]); err != nil {
					t.Errorf("%s: %v", spans[0], err)
				} else {
					checkedDefaults++
				}
			}
			for _, p := range want {
				if !slices.Contains(documented, p) {
					t.Errorf("README.md's %s table has no row for %s", typ, p)
				}
			}
			t.Logf("%d fields, %d rows, %d defaults compared", len(want), len(documented), checkedDefaults)
			if checkedDefaults == 0 {
				t.Error("no default was compared: the table's Default column is not read")
			}
		})
	}
}

// checkDefault compares the README's default of path with the config's:
// the README's value is decoded over a default config, which must not
// change it. zero, when set, is the value the code gives the field's zero.
func checkDefault(f factory, path, cell string, zero any) error {
	v, ok := docDefault(cell)
	if !ok {
		return nil
	}
	base := f.CreateDefaultConfig()
	withDoc := f.CreateDefaultConfig()
	// A list element starts from its zero value: decode an empty one.
	if list, _, isList := strings.Cut(path, "[]."); isList {
		empty := map[string]any{list: []any{map[string]any{}}}
		if err := confmap.NewFromStringMap(empty).Unmarshal(base); err != nil {
			return err
		}
	}
	if err := confmap.NewFromStringMap(confAt(path, v)).Unmarshal(withDoc); err != nil {
		return fmt.Errorf("the default %s does not decode: %w", cell, err)
	}
	got, err := fieldAt(reflect.ValueOf(base), path)
	if err != nil {
		return err
	}
	doc, err := fieldAt(reflect.ValueOf(withDoc), path)
	if err != nil {
		return err
	}
	if zero != nil {
		if !got.IsZero() {
			return fmt.Errorf("the default config sets %v, not the zero the code replaces with %v", got, zero)
		}
		if !reflect.DeepEqual(doc.Interface(), reflect.ValueOf(zero).Convert(doc.Type()).Interface()) {
			return fmt.Errorf("README.md says the default is %s, the code applies %v", cell, zero)
		}
		return nil
	}
	if !reflect.DeepEqual(got.Interface(), doc.Interface()) {
		return fmt.Errorf("README.md says the default is %s, createDefaultConfig has %v", cell, got)
	}
	return nil
}

// proseDefault is a Default cell in words and what it claims, checked.
type proseDefault struct {
	cell  string
	check func(f factory, path string) error
}

// proseDefaults holds the Default cells written in words, by table and
// field: each is checked for what it says. A cell in words not listed
// fails TestREADMEConfigTables.
var proseDefaults = map[string]map[string]proseDefault{
	"ebpfprof": {
		"symbolizer.debuginfod.urls": {"`$DEBUGINFOD_URLS`", func(f factory, path string) error {
			return checkEnvDefault(f, path, "DEBUGINFOD_URLS", "http://a.example:8002 https://b.example",
				func(c debuginfod.Config) any { return c.URLs }, []string{"http://a.example:8002", "https://b.example"}, []string{})
		}},
		"symbolizer.debuginfod.timeout": {"`$DEBUGINFOD_TIMEOUT` (whole seconds), else 90s", func(f factory, path string) error {
			return checkEnvDefault(f, path, "DEBUGINFOD_TIMEOUT", "7",
				func(c debuginfod.Config) any { return c.Timeout }, 7*time.Second, 90*time.Second)
		}},
		"symbolizer.debuginfod.max_size": {"`$DEBUGINFOD_MAXSIZE`, else 1 GiB", func(f factory, path string) error {
			return checkEnvDefault(f, path, "DEBUGINFOD_MAXSIZE", "12345",
				func(c debuginfod.Config) any { return c.MaxSize }, int64(12345), int64(1<<30))
		}},
		// Where "" leads (XDG_CACHE_HOME, HOME, neither) is checked by
		// ebpfprofreceiver's TestSymbolizerCacheDirDefault.
		"symbolizer.cache_dir":         {"user cache dir + `bpfcol/debuginfod` (`$XDG_CACHE_HOME`, else `$HOME/.cache`; with neither set, as for a systemd service without `User=`, nothing is fetched and a warning says so: set it)", zeroDefault},
		"symbolizer.debug_directories": {"none", zeroDefault},
	},
	"uprobe": {
		"probes":              {"none", zeroDefault},
		"probes[].id":         {"required", requiredDefault},
		"probes[].file_match": {"—", zeroDefault},
		"probes[].binary":     {"—", zeroDefault},
		"probes[].entry":      {"required", requiredDefault},
		// No pid filter: every process.
		"probes[].pids": {"all", zeroDefault},
	},
}

// checkProseDefault checks a Default cell in words with its proseDefaults
// entry.
func checkProseDefault(f factory, typ, path, cell string) error {
	d, ok := proseDefaults[typ][path]
	switch {
	case !ok:
		return fmt.Errorf("the default %q is in words and has no check: add one to proseDefaults", cell)
	case d.cell != cell:
		return fmt.Errorf("the default reads %q, proseDefaults checks %q: update it", cell, d.cell)
	}
	return d.check(f, path)
}

// defaultField returns the field path names in f's default config; a
// list element's field is read from an element decoded from nothing.
func defaultField(f factory, path string) (reflect.Value, error) {
	cfg := f.CreateDefaultConfig()
	if list, _, isList := strings.Cut(path, "[]."); isList {
		empty := map[string]any{list: []any{map[string]any{}}}
		if err := confmap.NewFromStringMap(empty).Unmarshal(cfg); err != nil {
			return reflect.Value{}, err
		}
	}
	return fieldAt(reflect.ValueOf(cfg), path)
}

// zeroDefault checks a default that is the field left unset: "none",
// "all", "—", or one the code resolves when it starts.
func zeroDefault(f factory, path string) error {
	v, err := defaultField(f, path)
	if err != nil {
		return err
	}
	if !v.IsZero() && !(v.Kind() == reflect.Slice && v.Len() == 0) {
		return fmt.Errorf("the default config sets %v, not nothing", v)
	}
	return nil
}

// requiredDefault checks a "required" field: unset by default, and a
// config that leaves it unset (its other fields valid) is refused naming
// it.
func requiredDefault(f factory, path string) error {
	if err := zeroDefault(f, path); err != nil {
		return err
	}
	list, field, _ := strings.Cut(path, "[].")
	probe := map[string]any{"id": "p", "binary": "/usr/bin/true", "entry": "main"}
	delete(probe, field)
	cfg := f.CreateDefaultConfig()
	if err := confmap.NewFromStringMap(map[string]any{list: []any{probe}}).Unmarshal(cfg); err != nil {
		return err
	}
	if err := confmap.Validate(cfg); err == nil || !strings.Contains(err.Error(), field) {
		return fmt.Errorf("a config without it is not refused naming it: %v", err)
	}
	return nil
}

// checkEnvDefault checks a setting whose default is an environment
// variable with a fallback: unset in the default config, and debuginfod's
// client (the symbolizer's) taking set from the variable when given and
// unset otherwise.
func checkEnvDefault(f factory, path, env, value string, get func(debuginfod.Config) any, set, unset any) error {
	if err := zeroDefault(f, path); err != nil {
		return err
	}
	for _, c := range []struct {
		env  string
		want any
	}{{value, set}, {"", unset}} {
		got, err := debuginfod.ConfigFromEnv(debuginfod.Config{}, func(k string) string {
			if k == env {
				return c.env
			}
			return ""
		})
		if err != nil {
			return err
		}
		if v := get(got); !reflect.DeepEqual(v, c.want) && !(reflect.ValueOf(v).Kind() == reflect.Slice && reflect.ValueOf(v).Len() == 0 && reflect.ValueOf(c.want).Len() == 0) {
			return fmt.Errorf("with %s=%q the client takes %v, want %v", env, c.env, v, c.want)
		}
	}
	return nil
}
