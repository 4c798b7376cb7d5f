package confcheck

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

type inner struct {
	Size  int64         `mapstructure:"size"`
	Ratio float64       `mapstructure:"ratio"`
	Wait  time.Duration `mapstructure:"wait"`
}

type cfg struct {
	Freq     int              `mapstructure:"freq"`
	PIDs     []int            `mapstructure:"pids"`
	Inner    inner            `mapstructure:"inner"`
	ByName   map[string]uint8 `mapstructure:"by_name"`
	Embedded `mapstructure:",squash"`
}

type Embedded struct {
	Count uint `mapstructure:"count"`
}

func check(m map[string]any) error {
	return Integers(confmap.NewFromStringMap(m), &cfg{})
}

func TestIntegers(t *testing.T) {
	ok := map[string]any{
		"freq": 20, "pids": []any{1, 2.0}, "count": 3,
		"inner":   map[string]any{"size": 1e9, "ratio": 0.5, "wait": 0},
		"by_name": map[string]any{"a": 1},
	}
	if err := check(ok); err != nil {
		t.Errorf("whole numbers refused: %v", err)
	}
	ok["inner"].(map[string]any)["wait"] = "1.5s"
	if err := check(ok); err != nil {
		t.Errorf("a duration with its unit refused: %v", err)
	}
	for field, m := range map[string]map[string]any{
		"freq":                       {"freq": 20.9},
		"pids[1]":                    {"pids": []any{1, 2.5}},
		"inner::size":                {"inner": map[string]any{"size": 1.5}},
		"inner::wait":                {"inner": map[string]any{"wait": 0.5}},
		"inner::wait: 5 has no unit": {"inner": map[string]any{"wait": 5}},
		"by_name::a":                 {"by_name": map[string]any{"a": 1.25}},
		"count":                      {"count": 3.1},
		"freq: 1e+300":               {"freq": 1e300},
	} {
		err := check(m)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%v: %v, want an error naming %s", m, err, field)
		}
	}
}
