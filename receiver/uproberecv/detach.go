package uproberecv

import (
	"sync"

	"go.uber.org/zap"
)

// detacher closes the uprobes of detached binaries on a goroutine of its
// own. The kernel's unregistration takes the same lock as a registration
// and then waits for RCU grace periods (a cold one took 48-237 ms here):
// done under the tracker's lock, or on the event loop, it held up every
// exec noticed meanwhile, and the attach each one needed.
type detacher struct {
	logger *zap.Logger

	mu      sync.Mutex
	queue   []detaching
	running bool
	// binaries counts the queued binaries and the one being closed: their
	// uprobes still exist in the kernel, and count toward maxBinaries.
	binaries int
	idle     *sync.Cond // broadcast when nothing is queued or running
}

// detaching is the uprobes of one binary, waiting to be closed.
type detaching struct {
	path string
	as   []attachment
}

func newDetacher(logger *zap.Logger) *detacher {
	d := &detacher{logger: logger}
	d.idle = sync.NewCond(&d.mu)
	return d
}

// detach has as closed soon, without waiting for it.
func (d *detacher) detach(path string, as []attachment) {
	if len(as) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queue = append(d.queue, detaching{path: path, as: as})
	d.binaries++
	if !d.running {
		d.running = true
		go d.run()
	}
}

// maxParallelCloses bounds the closes under way at once. Unregistrations
// in parallel share the kernel's grace periods: a shutdown with 257
// binaries took 28 s closing them one by one, 2.3 s 16 at a time.
const maxParallelCloses = 16

func (d *detacher) run() {
	d.mu.Lock()
	for len(d.queue) > 0 {
		batch := d.queue
		d.queue = nil
		d.mu.Unlock()
		var wg sync.WaitGroup
		slots := make(chan struct{}, maxParallelCloses)
		for _, next := range batch {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				closeNow(d.logger, next.path, next.as)
				<-slots
				d.mu.Lock()
				d.binaries--
				d.mu.Unlock()
			}()
		}
		wg.Wait()
		d.mu.Lock()
	}
	d.running = false
	d.idle.Broadcast()
	d.mu.Unlock()
}

// pending returns how many binaries' uprobes are still to be closed.
func (d *detacher) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.binaries
}

// wait returns once every uprobe handed to detach so far is closed.
func (d *detacher) wait() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.running {
		d.idle.Wait()
	}
}

// closeNow closes as, logging failures.
func closeNow(logger *zap.Logger, path string, as []attachment) {
	for _, a := range as {
		if err := a.Close(); err != nil {
			logger.Warn("detaching uprobes", zap.String("path", path), zap.Error(err))
		}
	}
}
