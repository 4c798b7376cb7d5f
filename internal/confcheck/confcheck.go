// Package confcheck catches values that the collector's config decoding
// would silently change: a number with a fraction decoded into an integer
// field is truncated (sampling_frequency: 20.9 would run at 20 Hz), and a
// duration given as a bare number is taken as nanoseconds.
package confcheck

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// Integers returns an error naming every integer field of cfg (a pointer to
// a struct with mapstructure tags) that conf sets to a number with a
// fraction, or to one outside the 64-bit range. Call it from the config's
// Unmarshal, before conf.Unmarshal.
func Integers(conf *confmap.Conf, cfg any) error {
	t := reflect.TypeOf(cfg)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return errors.Join(walk(conf.ToStringMap(), t, "")...)
}

// Unmarshal decodes conf into cfg (a pointer to a struct with mapstructure
// tags) once Integers found no integer field that decoding would truncate.
// A config's confmap.Unmarshaler calls it as its whole body.
func Unmarshal(conf *confmap.Conf, cfg any) error {
	if err := Integers(conf, cfg); err != nil {
		return err
	}
	return conf.Unmarshal(cfg)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "::" + name
}

var durationType = reflect.TypeOf(time.Duration(0))

func walk(raw any, t reflect.Type, path string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		// A bare number decodes as nanoseconds: min_duration: 5 would keep
		// every call of 5 ns or more, not of 5 ms.
		switch v := raw.(type) {
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
			if reflect.ValueOf(v).IsZero() {
				return nil
			}
			return []error{fmt.Errorf("%s: %v has no unit: write it with one, such as %vms, %vs or %vns", path, raw, raw, raw, raw)}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil
		}
		var errs []error
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			switch {
			case name == "-":
				continue
			case strings.Contains(opts, "squash"):
				errs = append(errs, walk(raw, f.Type, path)...)
				continue
			case name == "":
				name = f.Name // mapstructure matches the field name, case-sensitively in confmap
			}
			if v, ok := m[name]; ok {
				errs = append(errs, walk(v, f.Type, join(path, name))...)
			}
		}
		return errs
	case reflect.Slice, reflect.Array:
		l, ok := raw.([]any)
		if !ok {
			return nil
		}
		var errs []error
		for i, v := range l {
			errs = append(errs, walk(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case reflect.Map:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil
		}
		var errs []error
		for k, v := range m {
			errs = append(errs, walk(v, t.Elem(), join(path, k))...)
		}
		return errs
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		var f float64
		switch v := raw.(type) {
		case float64:
			f = v
		case float32:
			f = float64(v)
		default:
			return nil
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
			return []error{fmt.Errorf("%s: %v is not a whole number", path, raw)}
		}
		if f >= math.MaxInt64 || f < math.MinInt64 {
			return []error{fmt.Errorf("%s: %v is out of range", path, raw)}
		}
	}
	return nil
}
