package ebpfprofreceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
)

type profilesReceiver struct {
	set  receiver.Settings
	cfg  *Config
	next xconsumer.Profiles
}

func newProfilesReceiver(set receiver.Settings, cfg *Config, next xconsumer.Profiles) (*profilesReceiver, error) {
	return &profilesReceiver{set: set, cfg: cfg, next: next}, nil
}

func (r *profilesReceiver) Start(context.Context, component.Host) error { return nil }

func (r *profilesReceiver) Shutdown(context.Context) error { return nil }
