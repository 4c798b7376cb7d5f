package ebpfprofreceiver

import (
	"os"
	"time"

	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/unwind/cfi"
	"github.com/bpfcol/bpfcol/internal/unwind/loader"
)

// Bounds of the CFI table builds: the files waiting to be built, and how
// long a table built while its debug file was being fetched is kept.
const (
	unwindBuildQueue = 256
	unwindRetryAfter = 30 * time.Second
)

// startUnwind builds CFI tables on the store's worker and loads them into
// the sampler on the loader's goroutine: sampling and aggregation never
// wait for either.
func (r *profilesReceiver) startUnwind() {
	var l *loader.Loader
	cfg := cfi.StoreConfig{
		// Go holds a compiled table only until the loader has copied it
		// into BPF (ReleaseLoaded): kept, the tables of a busy host took
		// 16-30 MB of heap, three times their 8-byte BPF rows. A table
		// evicted from BPF, or moved, is built again. The same bound
		// applies to the tables waiting to be loaded.
		MaxBytes:   r.cfg.UnwindTableBytes,
		QueueLen:   unwindBuildQueue,
		RetryAfter: unwindRetryAfter,
	}
	if sym := r.symbolizer; sym != nil {
		// .debug_frame from the debug file where .eh_frame covers too
		// little, found the way frames are named. Unwinding never starts
		// a download itself (small binaries' startup stubs alone often
		// leave .eh_frame under the coverage bar): a file the symbolizer
		// fetches later fills the table on a rebuild.
		cfg.DebugFile = func(buildID string) (*os.File, error) {
			f, mayArrive, err := sym.OpenLocalDebugFile(buildID)
			if f == nil && mayArrive {
				return nil, cfi.ErrPending
			}
			return f, err
		}
	}
	r.unwindTables = cfi.NewStore[process.FileKey](cfg, func(key process.FileKey, _ *cfi.Entry) { l.Built(key) })
	// The loader sweeps when the aggregator ticks it, for every drained
	// batch (every report interval at least, on an idle host): no wakeup
	// of its own. Tables are built on demand: only for the files sampled
	// stacks enter, which the sampler asks for as a walk enters them.
	l = loader.New(loader.Config{Sink: r.sampler, Tables: r.unwindTables, SweepOnTick: true, ReleaseLoaded: true})
	r.unwind = l
}
