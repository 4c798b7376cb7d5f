package pprofexporter

import (
	"bytes"
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/bpfcol/bpfcol/exporter/pprofexporter/internal/pprofconv"
)

// pprofExporter converts each export to one pprof profile and stores it.
type pprofExporter struct {
	store  *fileStore
	logger *zap.Logger
}

func newPprofExporter(cfg *Config, logger *zap.Logger) *pprofExporter {
	return &pprofExporter{store: newFileStore(cfg.Directory, cfg.MaxFiles), logger: logger}
}

func (e *pprofExporter) start(context.Context, component.Host) error {
	return e.store.open()
}

func (e *pprofExporter) shutdown(context.Context) error {
	return e.store.close()
}

// pushProfiles writes one file per call. A call without samples writes
// nothing, so latest.pb.gz keeps the last interval that had any.
func (e *pprofExporter) pushProfiles(_ context.Context, pd pprofile.Profiles) error {
	if pd.SampleCount() == 0 {
		return nil
	}
	prof, err := pprofconv.Convert(pd)
	if err != nil {
		// Retrying the same data cannot fix it.
		return consumererror.NewPermanent(fmt.Errorf("converting to pprof: %w", err))
	}
	var buf bytes.Buffer
	if err := prof.Write(&buf); err != nil {
		return consumererror.NewPermanent(fmt.Errorf("encoding the pprof profile: %w", err))
	}
	path, err := e.store.write(buf.Bytes())
	if err != nil {
		return fmt.Errorf("storing the pprof profile: %w", err)
	}
	e.logger.Debug("wrote pprof profile", zap.String("path", path), zap.Int("samples", len(prof.Sample)))
	return nil
}
