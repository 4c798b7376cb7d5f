package ebpfprofreceiver

import (
	"testing"

	"go.opentelemetry.io/collector/featuregate"
)

func TestProfilesSupportGateEnabled(t *testing.T) {
	found := false
	featuregate.GlobalRegistry().VisitAll(func(g *featuregate.Gate) {
		if g.ID() != profilesSupportGateID {
			return
		}
		found = true
		if !g.IsEnabled() {
			t.Errorf("feature gate %s is registered but disabled after init", profilesSupportGateID)
		}
	})
	if !found {
		t.Fatalf("feature gate %s is not registered: the collector renamed or removed it", profilesSupportGateID)
	}
}
