package ebpfprofreceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfcol/bpfcol/receiver/ebpfprofreceiver/internal/metadata"
)

// NewFactory returns the factory of the ebpfprof receiver.
func NewFactory() receiver.Factory {
	return xreceiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		xreceiver.WithProfiles(createProfiles, metadata.ProfilesStability),
	)
}

func createProfiles(_ context.Context, set receiver.Settings, cfg component.Config, next xconsumer.Profiles) (xreceiver.Profiles, error) {
	return newProfilesReceiver(set, cfg.(*Config), next)
}
