package dirwatch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bpfcol/bpfcol/internal/safefs"
)

// watchMask: files closed after writing, moved in, and created (a hard
// link brings a complete file without a write). IN_EXCL_UNLINK leaves out
// files already unlinked; IN_ONLYDIR refuses anything but a directory.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_EXCL_UNLINK | unix.IN_ONLYDIR

// readBuffer holds many events per read (each 16 bytes plus its name).
const readBuffer = 64 << 10

// Watcher watches a bounded set of directories. Next is for one consumer;
// Stats and Close are safe from any goroutine.
type Watcher struct {
	file *os.File // the inotify instance, non-blocking, read through the netpoller
	dirs map[int32]*safefs.Dir
	opts Options
	// start runs the reader on the first Next, so that a consumer started
	// late still finds the events the kernel queued meanwhile.
	start sync.Once

	mu      sync.Mutex
	changed sync.Cond
	queue   []*Change // oldest first
	pending map[fileKey]*Change
	stats   Stats
	closed  bool
	err     error // why the reader stopped
	lostNow bool  // a Lost change is queued and not taken yet
}

type fileKey struct {
	wd   int32
	name string
}

// New watches dirs, each opened so that nothing beneath it follows a
// symlink, and watched through its open descriptor. A directory that
// cannot be watched (missing, not a directory) is left out and its error
// returned in skipped; err is set only when nothing could be set up.
func New(dirs []string, opts Options) (_ *Watcher, skipped []error, err error) {
	if len(dirs) > opts.MaxDirs {
		return nil, nil, fmt.Errorf("watching %d directories: more than %d", len(dirs), opts.MaxDirs)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("creating an inotify instance: %w", err)
	}
	w := &Watcher{file: os.NewFile(uintptr(fd), "inotify"), dirs: map[int32]*safefs.Dir{}, opts: opts, pending: map[fileKey]*Change{}}
	w.changed.L = &w.mu
	for _, path := range dirs {
		d, err := safefs.OpenNoLinks(path)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("watching %s: %w", path, err))
			continue
		}
		wd, err := unix.InotifyAddWatch(fd, d.ProcPath(), watchMask)
		if err != nil {
			d.Close()
			skipped = append(skipped, fmt.Errorf("watching %s: %w", path, err))
			continue
		}
		if old := w.dirs[int32(wd)]; old != nil {
			// The same directory under two names: one watch.
			d.Close()
			continue
		}
		w.dirs[int32(wd)] = d
	}
	return w, skipped, nil
}

// Dirs returns the paths of the directories watched.
func (w *Watcher) Dirs() []string {
	var out []string
	for _, d := range w.dirs {
		out = append(out, d.Name())
	}
	return out
}

// Next blocks until a file changed, events were lost, or the Watcher is
// closed (ErrClosed).
func (w *Watcher) Next() (Change, error) {
	w.start.Do(func() { go w.read() })
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && !w.closed {
		w.changed.Wait()
	}
	if w.closed {
		// Its directories may be closed: nothing waiting is of use.
		if w.err != nil {
			return Change{}, w.err
		}
		return Change{}, ErrClosed
	}
	c := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if c.Lost {
		w.lostNow = false
	} else {
		delete(w.pending, fileKey{c.wd, c.Name})
	}
	return *c, nil
}

// Stats returns the counts since New.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close stops the watch and drops the changes waiting: Next returns
// ErrClosed. It is safe to call more than once.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed && w.file == nil {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.queue = nil
	f := w.file
	w.file = nil
	w.changed.Broadcast()
	w.mu.Unlock()
	// Closing the descriptor ends the reader's Read.
	errs := []error{f.Close()}
	for _, d := range w.dirs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// read turns the kernel's events into Changes until the Watcher closes.
func (w *Watcher) read() {
	w.mu.Lock()
	f := w.file
	w.mu.Unlock()
	if f == nil {
		return
	}
	buf := make([]byte, readBuffer)
	for {
		n, err := f.Read(buf)
		if err != nil {
			w.mu.Lock()
			if !w.closed {
				w.err = fmt.Errorf("reading directory events: %w", err)
				w.closed = true
			}
			w.changed.Broadcast()
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.parse(buf[:n])
		w.changed.Broadcast()
		w.mu.Unlock()
	}
}

// parse queues the events in buf; w.mu is held.
func (w *Watcher) parse(buf []byte) {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return
		}
		name := buf[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		buf = buf[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			w.stats.Overflows++
			w.queueLost()
		case ev.Mask&unix.IN_IGNORED != 0:
			// The directory was removed or unmounted: its watch is gone.
			if d := w.dirs[ev.Wd]; d != nil {
				w.stats.DirsGone++
			}
		case ev.Mask&unix.IN_ISDIR != 0 || len(name) == 0:
			// Not a file in the directory; subdirectories are not watched.
		default:
			d := w.dirs[ev.Wd]
			if d == nil {
				continue
			}
			written := ev.Mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) != 0
			key := fileKey{ev.Wd, string(name)}
			if c := w.pending[key]; c != nil {
				c.Written = c.Written || written
				w.stats.Coalesced++
				continue
			}
			if len(w.pending) >= w.opts.MaxPending {
				w.stats.Dropped++
				w.queueLost()
				continue
			}
			c := &Change{Dir: d, Name: key.name, Written: written, wd: ev.Wd}
			w.pending[key] = c
			w.queue = append(w.queue, c)
		}
	}
}

// queueLost queues one Lost change unless one is waiting already.
func (w *Watcher) queueLost() {
	if w.lostNow {
		return
	}
	w.lostNow = true
	w.queue = append(w.queue, &Change{Lost: true})
}
