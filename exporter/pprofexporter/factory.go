package pprofexporter

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/bpfcol/bpfcol/exporter/pprofexporter/internal/metadata"
)

// NewFactory returns the factory of the pprof exporter.
func NewFactory() exporter.Factory {
	return xexporter.NewFactory(
		metadata.Type,
		createDefaultConfig,
		xexporter.WithProfiles(createProfiles, metadata.ProfilesStability),
	)
}

func createProfiles(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	e := newPprofExporter(cfg.(*Config), set.Logger)
	// No queue and no retry: writing a local file either works now or
	// fails for a reason (full disk, permissions) a retry will not fix.
	return xexporterhelper.NewProfiles(ctx, set, cfg, e.pushProfiles,
		exporterhelper.WithStart(e.start),
		exporterhelper.WithShutdown(e.shutdown),
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
	)
}
