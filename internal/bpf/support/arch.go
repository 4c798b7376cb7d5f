package support

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// ErrArchitecture reports a component that does not run on this machine's
// architecture yet.
var ErrArchitecture = errors.New("architecture not supported")

// Architecture requires that the collector runs on one of goarchs (Go's
// names); what says what is done there only (the x86-64 stack walk).
func Architecture(what string, goarchs ...string) Requirement {
	return architecture(what, runtime.GOARCH, goarchs...)
}

func architecture(what, goarch string, goarchs ...string) Requirement {
	return Requirement{Name: what, check: func(what string) error {
		if slices.Contains(goarchs, goarch) {
			return nil
		}
		return fmt.Errorf("%s runs on %s only, not on %s: %w", what, strings.Join(goarchs, ", "), goarch, ErrArchitecture)
	}}
}
