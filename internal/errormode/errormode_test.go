package errormode

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestValidate(t *testing.T) {
	for _, m := range []Mode{"", Propagate, Ignore} {
		if err := m.Validate(); err != nil {
			t.Errorf("%q: %v", m, err)
		}
	}
	if err := Mode("skip").Validate(); err == nil {
		t.Error(`"skip" accepted`)
	}
}

func TestOnStartError(t *testing.T) {
	boom := errors.New("missing capability CAP_BPF")
	core, logs := observer.New(zap.InfoLevel)
	// As the collector's production logger: stack traces from warn up.
	logger := zap.New(core, zap.AddStacktrace(zap.WarnLevel))
	if err := Propagate.OnStartError(logger, boom); !errors.Is(err, boom) {
		t.Fatalf("propagate returned %v", err)
	}
	if err := Mode("").OnStartError(logger, boom); !errors.Is(err, boom) {
		t.Fatalf("default returned %v", err)
	}
	if logs.Len() != 0 {
		t.Fatalf("propagate logged %d entries", logs.Len())
	}
	if err := Ignore.OnStartError(logger, boom); err != nil {
		t.Fatalf("ignore returned %v", err)
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["error"] != boom.Error() {
		t.Fatalf("ignore logged %v", logs.All())
	}
	if e := logs.All()[0]; e.Stack != "" {
		t.Errorf("ignore logged a stack trace with the reason:\n%s", e.Stack)
	}
	// The logger itself still adds stack traces elsewhere: only this
	// expected condition goes without.
	logger.Warn("other")
	if logs.Len() != 2 || logs.All()[1].Stack == "" {
		t.Error("the test logger adds no stack traces, so the check above cannot fail")
	}
}
