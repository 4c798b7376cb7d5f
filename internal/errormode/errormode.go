// Package errormode lets an operator choose what a receiver that cannot
// start does to the rest of the collector: stop it (propagate) or log why
// and stay inactive (ignore), for example on a node where BPF is not
// permitted.
package errormode

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Mode is the value of a receiver's error_mode field.
type Mode string

const (
	// Propagate fails the collector's start with the receiver's error.
	Propagate Mode = "propagate"
	// Ignore logs the error and leaves the receiver inactive.
	Ignore Mode = "ignore"
)

// Validate accepts "propagate", "ignore" and empty (propagate).
func (m Mode) Validate() error {
	switch m {
	case "", Propagate, Ignore:
		return nil
	}
	// No "error_mode:" prefix: the collector's validation names the field.
	return fmt.Errorf("%q is neither %q nor %q", string(m), Propagate, Ignore)
}

// OnStartError returns err under Propagate. Under Ignore it logs err as one
// warning line and returns nil, so the collector keeps running without this
// receiver. The condition is expected (the operator chose ignore), so the
// line carries the reason and no stack trace, whatever level the
// collector's logger adds stack traces at.
func (m Mode) OnStartError(logger *zap.Logger, err error) error {
	if err == nil || m != Ignore {
		return err
	}
	logger.WithOptions(zap.AddStacktrace(zap.LevelEnablerFunc(func(zapcore.Level) bool { return false }))).
		Warn("receiver not started; error_mode is ignore, so the collector runs without it", zap.Error(err))
	return nil
}
