package e2e

import (
	"testing"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
)

// namedWork is a function a benchmark's workload runs in, which the
// collector must name in its samples.
type namedWork struct {
	profiledWorkload
	// everySample is set when every sample of the workload is in the
	// function by construction (a busy loop calling it): then most of
	// them must name it. Otherwise one sample must.
	everySample bool
}

// requireNamed fails b unless every workload has samples among samples
// and they name its function (work.chain[0]): a collector that stopped
// naming, or stopped sampling a workload, would look cheap. Where every
// sample runs in the function, more than half must name it: the rest
// allows for samples taken while the workload started, or cut short.
func requireNamed(b *testing.B, samples []pprofiletest.Sample, work []namedWork) {
	b.Helper()
	for _, w := range work {
		sh := w.shares(samples)
		named := int64(sh.chain * float64(sh.samples) / 100)
		b.Logf("%s: %d samples, %d (%.1f%%) naming %s", w.name, sh.samples, named, sh.chain, w.chain[0])
		switch {
		case sh.samples == 0:
			b.Fatalf("no sample of the workload %s exported", w.name)
		case w.everySample && sh.chain <= 50:
			b.Fatalf("%.1f%% of the %d samples of %s name %s, which all run in it", sh.chain, sh.samples, w.name, w.chain[0])
		case named == 0:
			b.Fatalf("none of the %d samples of %s names %s", sh.samples, w.name, w.chain[0])
		}
	}
}
