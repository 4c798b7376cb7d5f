package uproberecv

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/receiver/uproberecv/internal/metadata"
)

// slowLogs is a consumer that takes delay per request and remembers the
// size of each.
type slowLogs struct {
	delay time.Duration
	mu    sync.Mutex
	sizes []int
}

func (s *slowLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *slowLogs) ConsumeLogs(_ context.Context, l plog.Logs) error {
	time.Sleep(s.delay)
	s.mu.Lock()
	s.sizes = append(s.sizes, l.LogRecordCount())
	s.mu.Unlock()
	return nil
}

func (s *slowLogs) requests() (n, records int, largest int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sz := range s.sizes {
		records += sz
		largest = max(largest, sz)
	}
	return len(s.sizes), records, largest
}

// TestBatchesWithSlowConsumer feeds records faster than a slow consumer
// takes requests, then a trickle: requests stay within batch.max_records,
// a burst goes out in full batches (not a request per record), a trickle
// in one request per batch.timeout, and every record is delivered.
func TestBatchesWithSlowConsumer(t *testing.T) {
	testenv.RequireBPF(t)
	const maxRecords, timeout = 500, 50 * time.Millisecond
	cfg := &Config{
		Probes: []ProbeConfig{{ID: "batch", Binary: "/nonexistent/batch", Entry: "f", Exit: "return"}},
		Batch:  BatchConfig{MaxRecords: maxRecords, Timeout: timeout},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	next := &slowLogs{delay: 100 * time.Millisecond}
	r, err := newLogsReceiver(receivertest.NewNopSettings(metadata.Type), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	r.opts = options{loadFiller: true}
	if err := r.Start(context.Background(), componentHost{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })

	// A burst: 10,000 records at once, a fifth of the ringbuf.
	const burst = 10000
	for sent := 0; sent < burst; sent += 1000 {
		if err := r.probes.Fill(1000, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(30*time.Second, func() bool { _, n, _ := next.requests(); return n >= burst }) {
		_, n, _ := next.requests()
		t.Fatalf("%d of %d records delivered", n, burst)
	}
	reqs, records, largest := next.requests()
	t.Logf("burst: %d records in %d requests, largest %d", records, reqs, largest)
	if largest > maxRecords {
		t.Errorf("a request of %d records, over batch.max_records %d", largest, maxRecords)
	}
	// The consumer is slow: records wait in the ringbuf meanwhile and go
	// out in full batches.
	if want := burst/maxRecords + 3; reqs > want {
		t.Errorf("%d requests for a burst of %d, want at most %d", reqs, burst, want)
	}

	// A trickle: one record every 5 ms for a second.
	before := reqs
	start := time.Now()
	const trickle = 200
	for range trickle {
		if err := r.probes.Fill(1, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !waitFor(10*time.Second, func() bool { _, n, _ := next.requests(); return n >= burst+trickle }) {
		_, n, _ := next.requests()
		t.Fatalf("%d of %d records delivered", n, burst+trickle)
	}
	elapsed := time.Since(start)
	reqs, records, _ = next.requests()
	t.Logf("trickle: %d records over %s in %d requests", trickle, elapsed.Round(time.Millisecond), reqs-before)
	// A request at most every batch.timeout plus the consumer's own time.
	if want := int(elapsed/timeout) + 2; reqs-before > want {
		t.Errorf("%d requests for a trickle of %d records over %s, want at most %d", reqs-before, trickle, elapsed, want)
	}
	if records != burst+trickle {
		t.Errorf("%d records delivered, want %d", records, burst+trickle)
	}
	c, err := r.probes.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.LostRingbuf != 0 {
		t.Errorf("%d records lost in the ringbuf", c.LostRingbuf)
	}
	if got := r.requests.Load(); got != int64(reqs) {
		t.Errorf("export_requests counts %d, the consumer saw %d", got, reqs)
	}
}
