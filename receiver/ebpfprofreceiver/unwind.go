package ebpfprofreceiver

import (
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
	r.unwindTables = cfi.NewStore[process.FileKey](cfi.StoreConfig{
		// The compiled tables are kept in Go too, so that a table evicted
		// from BPF comes back without a rebuild: the same bound applies.
		MaxBytes:   r.cfg.UnwindTableBytes,
		QueueLen:   unwindBuildQueue,
		RetryAfter: unwindRetryAfter,
	}, func(key process.FileKey, _ *cfi.Entry) { l.Built(key) })
	l = loader.New(loader.Config{Sink: r.sampler, Tables: r.unwindTables})
	r.unwind = l
}
