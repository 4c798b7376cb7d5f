// Package debuginfod fetches separate debug info by GNU build-id from
// debuginfod servers (the elfutils protocol: GET URL/buildid/ID/debuginfo).
//
// Requests for one build-id are merged, the number of requests in flight is
// bounded, every request has a timeout and a size limit, transient failures
// are retried with backoff, and a server that keeps failing at the network
// level is skipped for a while (circuit breaker).
package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults, from elfutils where it has one.
const (
	DefaultTimeout = 90 * time.Second
	DefaultMaxSize = 2 << 30
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
	// ErrInvalidBuildID means the build-id is not lowercase hex.
	ErrInvalidBuildID = errors.New("build-id is not lowercase hex")
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
	if len(c.URLs) == 0 {
		c.URLs = strings.Fields(getenv("DEBUGINFOD_URLS"))
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
			return c, fmt.Errorf("parsing debuginfod URL %q: want http(s)://host[/path]", u)
		}
	}
	return c, nil
}

// ValidBuildID reports whether id is lowercase hex of a plausible length,
// the only form allowed into a path or a URL.
func ValidBuildID(id string) bool {
	if len(id) < 2 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Validator checks a downloaded file before it is kept, for example that it
// is an ELF file with the requested build-id.
type Validator func(f *os.File) error

// Result describes one successful fetch.
type Result struct {
	// Server is the URL that served the file.
	Server string
	// Bytes is the size of the file.
	Bytes int64
}

// Client fetches debug info. Safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	sem  chan struct{}
	sf   singleflight.Group

	mu       sync.Mutex
	breakers map[string]*breaker
	now      func() time.Time
}

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

// Fetch downloads the debug info of buildID into dst, trying the servers in
// order. The file is written to a temporary file in dst's directory,
// validated, fsynced and renamed into place, so dst is never seen half
// written. Concurrent calls for one build-id share one download.
func (c *Client) Fetch(ctx context.Context, buildID, dst string, validate Validator) (Result, error) {
	if !ValidBuildID(buildID) {
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
		return c.fetch(ctx, buildID, dst, validate)
	})
	return v.(Result), err
}

func (c *Client) fetch(ctx context.Context, buildID, dst string, validate Validator) (Result, error) {
	var errs []error
	notFound := 0
	for _, server := range c.cfg.URLs {
		if !c.allow(server) {
			errs = append(errs, fmt.Errorf("%s: circuit breaker open", server))
			continue
		}
		res, err := c.fetchFrom(ctx, server, buildID, dst, validate)
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
		return Result{}, fmt.Errorf("fetching %s: %w", buildID, ErrNotFound)
	}
	return Result{}, fmt.Errorf("fetching %s: %w", buildID, errors.Join(errs...))
}

// transientError marks failures worth a retry and counted by the breaker.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

func (c *Client) fetchFrom(ctx context.Context, server, buildID, dst string, validate Validator) (Result, error) {
	backoff := c.cfg.Backoff
	for attempt := 0; ; attempt++ {
		res, err := c.request(ctx, server, buildID, dst, validate)
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

func (c *Client) request(ctx context.Context, server, buildID, dst string, validate Validator) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	u := strings.TrimRight(server, "/") + "/buildid/" + buildID + "/debuginfo"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Result{}, fmt.Errorf("%s: building request: %w", server, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Result{}, transientError{fmt.Errorf("%s: %w", server, err)}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return Result{}, fmt.Errorf("%s: %w", server, ErrNotFound)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return Result{}, transientError{fmt.Errorf("%s: HTTP %s", server, resp.Status)}
	case resp.StatusCode != http.StatusOK:
		return Result{}, fmt.Errorf("%s: HTTP %s", server, resp.Status)
	}
	if resp.ContentLength > c.cfg.MaxSize {
		return Result{}, fmt.Errorf("%s: %d bytes: %w", server, resp.ContentLength, ErrTooLarge)
	}
	if v := resp.Header.Get("X-Debuginfod-Size"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > c.cfg.MaxSize {
			return Result{}, fmt.Errorf("%s: %d bytes: %w", server, n, ErrTooLarge)
		}
	}
	n, err := writeAtomically(dst, io.LimitReader(resp.Body, c.cfg.MaxSize+1), c.cfg.MaxSize, validate)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, io.ErrUnexpectedEOF) {
			return Result{}, transientError{fmt.Errorf("%s: %w", server, err)}
		}
		return Result{}, fmt.Errorf("%s: %w", server, err)
	}
	return Result{Server: server, Bytes: n}, nil
}

// writeAtomically copies r into a temporary file next to dst, validates
// it, fsyncs it and renames it to dst.
func writeAtomically(dst string, r io.Reader, maxSize int64, validate Validator) (n int64, err error) {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".fetch-*")
	if err != nil {
		return 0, fmt.Errorf("creating temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err = io.Copy(tmp, r)
	if err != nil {
		return n, fmt.Errorf("downloading: %w", err)
	}
	if n > maxSize {
		return n, fmt.Errorf("downloading: %w", ErrTooLarge)
	}
	if validate != nil {
		if err := validate(tmp); err != nil {
			return n, fmt.Errorf("validating download: %w", err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return n, fmt.Errorf("syncing download: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return n, fmt.Errorf("closing download: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return n, fmt.Errorf("renaming download into place: %w", err)
	}
	return n, nil
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
