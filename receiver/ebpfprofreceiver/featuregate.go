package ebpfprofreceiver

import (
	"go.opentelemetry.io/collector/featuregate"
	// The service.profilesSupport gate is registered by a package-level var in
	// service/internal/metadata. Go initialises a package only after every
	// package it imports, so importing service/pipelines (a public importer of
	// that internal package) guarantees the gate exists when init below runs.
	// Without it our package, whose path sorts before go.opentelemetry.io/...,
	// may be initialised first and Set would fail with "no such feature gate".
	_ "go.opentelemetry.io/collector/service/pipelines"
)

// profilesSupportGateID is the service gate that rejects profiles pipelines
// while it is off (collector v0.162.0, stage alpha).
const profilesSupportGateID = "service.profilesSupport"

// init turns the gate on because bpfcol exists to run a profiles pipeline:
// users must never need --feature-gates=service.profilesSupport. Flags are
// parsed after init, so an explicit --feature-gates=-service.profilesSupport
// still wins.
func init() {
	// Set fails only if a collector upgrade removes the gate. There is no error
	// path out of init and panicking is not allowed, so the error is dropped:
	// the collector then rejects profiles pipelines with a message naming the
	// gate, and TestProfilesSupportGateEnabled fails in CI.
	_ = featuregate.GlobalRegistry().Set(profilesSupportGateID, true)
}
