// Package debuginfod fetches separate debug info by GNU build-id from
// debuginfod servers (the elfutils protocol: GET URL/buildid/ID/debuginfo).
//
// Requests for one build-id are merged, the number of requests in flight is
// bounded, every request has a timeout and a size limit, transient failures
// are retried with backoff, and a server that keeps failing at the network
// level is skipped for a while (circuit breaker).
//
// Nothing a server sends is trusted: the advertised size is checked before
// the body is read, and the body is checked as it streams into the debug
// cache (StreamCheck), so a body that is not the requested ELF file is
// dropped at its first wrong bytes, never after it is all on disk.
package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/bpfcol/bpfcol/internal/symbolize/buildid"
	"github.com/bpfcol/bpfcol/internal/symbolize/debugcache"
)

// Defaults, from elfutils where it has one. elfutils has no size limit;
// ours bounds what one download may write to disk.
const (
	DefaultTimeout = 90 * time.Second
	DefaultMaxSize = 1 << 30
	// DefaultConcurrency bounds requests in flight across all build-ids.
	DefaultConcurrency = 4
	defaultRetries     = 2
	defaultBackoff     = 200 * time.Millisecond
	// A server is skipped for breakerCooldown after breakerThreshold
	// network failures in a row.
	breakerThreshold = 3
	breakerCooldown  = 30 * time.Second
)

// Errors callers can tell apart.
var (
	// ErrNotFound means every server answered that it has no such file.
	ErrNotFound = errors.New("debug info not found")
	// ErrInvalidBuildID means the build-id fails buildid.Valid.
	ErrInvalidBuildID = debugcache.ErrInvalidBuildID
	// ErrTooLarge means the file exceeds the size limit.
	ErrTooLarge = errors.New("debug info larger than the size limit")
	// ErrNoServers means no server is configured.
	ErrNoServers = errors.New("no debuginfod server configured")
)

// Config configures a Client. Zero fields take the DEBUGINFOD_URLS,
// DEBUGINFOD_TIMEOUT and DEBUGINFOD_MAXSIZE environment variables, then the
// defaults.
type Config struct {
	// URLs are tried in order.
	URLs []string
	// Timeout bounds one request, body included.
	Timeout time.Duration
	// MaxSize bounds the size of one file, in bytes.
	MaxSize int64
	// Concurrency bounds the requests in flight.
	Concurrency int
	// Retries is how many times a transient failure is retried per server;
	// negative means none.
	Retries int
	// Backoff is the wait before the first retry, doubled for each next.
	Backoff time.Duration
}

// ConfigFromEnv fills the zero fields of c from the environment, then from
// the defaults.
func ConfigFromEnv(c Config, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	fromEnv := false
	if len(c.URLs) == 0 {
		c.URLs = strings.Fields(getenv("DEBUGINFOD_URLS"))
		fromEnv = len(c.URLs) > 0
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
		if v := getenv("DEBUGINFOD_TIMEOUT"); v != "" {
			secs, err := strconv.Atoi(v)
			if err != nil || secs <= 0 {
				return c, fmt.Errorf("parsing DEBUGINFOD_TIMEOUT %q: want a positive number of seconds", v)
			}
			c.Timeout = time.Duration(secs) * time.Second
		}
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
		if v := getenv("DEBUGINFOD_MAXSIZE"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return c, fmt.Errorf("parsing DEBUGINFOD_MAXSIZE %q: want a positive number of bytes", v)
			}
			c.MaxSize = n
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Retries == 0 {
		c.Retries = defaultRetries
	}
	if c.Backoff <= 0 {
		c.Backoff = defaultBackoff
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			if fromEnv {
				return c, fmt.Errorf("parsing DEBUGINFOD_URLS: %q is not http(s)://host[/path]", u)
			}
			return c, fmt.Errorf("parsing debuginfod URL %q: want http(s)://host[/path]", u)
		}
	}
	return c, nil
}

// Validator checks a downloaded file before it is kept, for example that it
// has DWARF or a symbol table. StreamCheck has already checked that it is
// ELF with the requested build-id. An error is counted as ErrInvalid.
type Validator func(f *os.File) error

// Result describes one fetch.
type Result struct {
	// Server is the URL that served the file ("" when none did).
	Server string
	// Bytes counts every body byte received for the fetch, from every
	// server and attempt, rejected downloads included.
	Bytes int64
	// Size is the size of the file kept.
	Size int64
}

// Client fetches debug info. Safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	sem  chan struct{}
	sf   singleflight.Group

	received atomic.Int64

	mu       sync.Mutex
	breakers map[string]*breaker
	now      func() time.Time
}

// BytesReceived returns every body byte received since New, rejected
// downloads included.
func (c *Client) BytesReceived() int64 { return c.received.Load() }

type breaker struct {
	failures  int
	openUntil time.Time
}

// New returns a Client for cfg, which ConfigFromEnv has completed.
func New(cfg Config) *Client {
	return &Client{
		cfg: cfg,
		// Timeouts are per request, through the context.
		http:     &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		sem:      make(chan struct{}, max(cfg.Concurrency, 1)),
		breakers: map[string]*breaker{},
		now:      time.Now,
	}
}

// Enabled reports whether any server is configured.
func (c *Client) Enabled() bool { return len(c.cfg.URLs) > 0 }

// Fetch downloads the debug info of buildID into store, trying the servers
// in order. The file streams into a temporary file of the store, checked
// as it arrives, then validated, fsynced and renamed into place, so it is
// never seen half written. Concurrent calls for one build-id share one
// download. An error wraps ErrInvalid when a server sent a body that is not
// the requested file; Result.Bytes counts what was received either way.
func (c *Client) Fetch(ctx context.Context, buildID string, store *debugcache.Cache, validate Validator) (Result, error) {
	if !buildid.Valid(buildID) {
		return Result{}, fmt.Errorf("fetching %q: %w", buildID, ErrInvalidBuildID)
	}
	if len(c.cfg.URLs) == 0 {
		return Result{}, ErrNoServers
	}
	v, err, _ := c.sf.Do(buildID, func() (any, error) {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		defer func() { <-c.sem }()
		return c.fetch(ctx, buildID, store, validate)
	})
	return v.(Result), err
}

func (c *Client) fetch(ctx context.Context, buildID string, store *debugcache.Cache, validate Validator) (Result, error) {
	var errs []error
	notFound := 0
	var received int64
	for _, server := range c.cfg.URLs {
		if !c.allow(server) {
			errs = append(errs, fmt.Errorf("%s: circuit breaker open", server))
			continue
		}
		res, err := c.fetchFrom(ctx, server, buildID, store, validate)
		received += res.Bytes
		res.Bytes = received
		if err == nil {
			return res, nil
		}
		if errors.Is(err, ErrNotFound) {
			notFound++
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if notFound == len(c.cfg.URLs) {
		return Result{Bytes: received}, fmt.Errorf("fetching %s: %w", buildID, ErrNotFound)
	}
	return Result{Bytes: received}, fmt.Errorf("fetching %s: %w", buildID, errors.Join(errs...))
}

// transientError marks failures worth a retry and counted by the breaker.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

func (c *Client) fetchFrom(ctx context.Context, server, buildID string, store *debugcache.Cache, validate Validator) (Result, error) {
	backoff := c.cfg.Backoff
	var received int64
	for attempt := 0; ; attempt++ {
		res, err := c.request(ctx, server, buildID, store, validate)
		received += res.Bytes
		res.Bytes = received
		var te transientError
		if !errors.As(err, &te) {
			if err == nil {
				c.record(server, false)
			}
			return res, err
		}
		c.record(server, true)
		if attempt >= c.cfg.Retries || !c.allow(server) {
			return res, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, err
		}
		backoff *= 2
	}
}

// request makes one attempt. Result.Bytes counts the body bytes received,
// whatever the outcome.
func (c *Client) request(ctx context.Context, server, buildID string, store *debugcache.Cache, validate Validator) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	u := strings.TrimRight(server, "/") + "/buildid/" + buildID + "/debuginfo"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return res, fmt.Errorf("%s: building request: %w", server, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return res, transientError{fmt.Errorf("%s: %w", server, err)}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return res, fmt.Errorf("%s: %w", server, ErrNotFound)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return res, transientError{fmt.Errorf("%s: HTTP %s", server, resp.Status)}
	case resp.StatusCode != http.StatusOK:
		return res, fmt.Errorf("%s: HTTP %s", server, resp.Status)
	}
	limit := c.cfg.MaxSize
	if room := store.Room(); room > 0 && (limit <= 0 || room < limit) {
		limit = room
	}
	if err := checkAdvertised(resp, limit); err != nil {
		return res, fmt.Errorf("%s: %w", server, err)
	}
	tmp, err := store.Create(buildID)
	if err != nil {
		return res, fmt.Errorf("%s: %w", server, err)
	}
	defer tmp.Discard() // after Commit, a no-op
	check, err := NewStreamCheck(buildID, tmp.File(), limit)
	if err != nil {
		return res, err
	}
	n, err := c.stream(tmp, resp.Body, check, limit)
	res.Bytes = n
	if err != nil {
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLarge) || errors.Is(err, debugcache.ErrFull) {
			return res, fmt.Errorf("%s: %w", server, err)
		}
		// The connection broke or the request timed out mid-body.
		return res, transientError{fmt.Errorf("%s: %w", server, err)}
	}
	if validate != nil {
		if err := validate(tmp.File()); err != nil {
			return res, fmt.Errorf("%s: %w: %w", server, ErrInvalid, err)
		}
	}
	if err := tmp.Commit(); err != nil {
		return res, fmt.Errorf("%s: %w", server, err)
	}
	res.Server, res.Size = server, n
	return res, nil
}

// checkAdvertised refuses a response whose Content-Length or
// X-Debuginfod-Size exceeds limit (<= 0: none) before its body is read.
func checkAdvertised(resp *http.Response, limit int64) error {
	if limit <= 0 {
		return nil
	}
	if resp.ContentLength > limit {
		return fmt.Errorf("Content-Length %d: %w (%d bytes)", resp.ContentLength, ErrTooLarge, limit)
	}
	if v := resp.Header.Get("X-Debuginfod-Size"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: X-Debuginfod-Size %q is not a size", ErrInvalid, v)
		}
		if n > limit {
			return fmt.Errorf("X-Debuginfod-Size %d: %w (%d bytes)", n, ErrTooLarge, limit)
		}
	}
	return nil
}

// copyBuffer is the size of one read from a response body.
const copyBuffer = 32 << 10

// stream copies body into tmp, counting every byte received, bounding the
// total by limit and checking the bytes as they arrive.
func (c *Client) stream(tmp *debugcache.Temp, body io.Reader, check *StreamCheck, limit int64) (int64, error) {
	buf := make([]byte, copyBuffer)
	var received, n int64 // bytes received, bytes kept
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			c.received.Add(int64(k))
			received += int64(k)
			// Bytes within the limit are checked first, so that a body
			// that is wrong and too large is reported as wrong.
			keep := int64(k)
			if limit > 0 && n+keep > limit {
				keep = limit - n
			}
			if _, err := tmp.Write(buf[:keep]); err != nil {
				return received, fmt.Errorf("downloading: %w", err)
			}
			n += keep
			if err := check.Advance(n); err != nil {
				return received, fmt.Errorf("checking download: %w", err)
			}
			if keep < int64(k) {
				return received, fmt.Errorf("downloading: more than %d bytes: %w", limit, ErrTooLarge)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return received, fmt.Errorf("downloading: %w", rerr)
		}
	}
	if err := check.Finish(n); err != nil {
		return received, fmt.Errorf("checking download: %w", err)
	}
	return received, nil
}

func (c *Client) allow(server string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.breakers[server]
	return b == nil || !c.now().Before(b.openUntil)
}

// record counts a network failure, or resets the count on success.
func (c *Client) record(server string, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.breakers[server]
	if b == nil {
		b = &breaker{}
		c.breakers[server] = b
	}
	if !failed {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= breakerThreshold {
		b.openUntil = c.now().Add(breakerCooldown)
		b.failures = 0
	}
}

// BreakerOpen reports whether server is being skipped.
func (c *Client) BreakerOpen(server string) bool { return !c.allow(server) }
