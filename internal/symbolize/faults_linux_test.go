//go:build linux

package symbolize

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfcol/bpfcol/internal/symbolize/debuginfod"
	"github.com/bpfcol/bpfcol/internal/symbolize/internal/symtest"
)

// TestFetchFaults points the Symbolizer at servers that misbehave (a fake
// server is the only way to make a real one fail on cue). Each case must
// end within its timeout, name nothing, cache the failure by build-id, and
// not ask the server again while the failure is cached; every failure but
// the server not having the file is logged as a warning naming the server.
func TestFetchFaults(t *testing.T) {
	ws := symtest.DWARFWorkloads(t, workloadDir)
	full := ws[0].Path
	stripped := filepath.Join(t.TempDir(), "stripped")
	id := stripCopy(t, full, stripped)
	otherELF, err := os.ReadFile(ws[len(ws)-1].Path) // valid ELF, another build-id
	if err != nil {
		t.Fatal(err)
	}
	fullELF, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }},
		{"500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }},
		{"hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"drip", func(w http.ResponseWriter, r *http.Request) {
			// The right file, far below the size limit, far beyond the
			// timeout.
			for i := 0; i < 1000; i++ {
				if _, err := w.Write(fullELF[i : i+1]); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}},
		{"oversize", func(w http.ResponseWriter, r *http.Request) { w.Write(fullELF) }},
		{"oversize-chunked", func(w http.ResponseWriter, r *http.Request) {
			w.Write(fullELF[:1000])
			w.(http.Flusher).Flush()
			w.Write(fullELF[1000:])
		}},
		{"wrong-build-id", func(w http.ResponseWriter, r *http.Request) { w.Write(otherELF) }},
		{"not-elf", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(strings.Repeat("garbage", 100))) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			// The server answers nothing until the first lookup has
			// returned: a lookup that waited for the fetch could only
			// return once the fetch had given up.
			lookedUp := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				select {
				case <-lookedUp:
				case <-r.Context().Done():
					return
				}
				tc.handler(w, r)
			}))
			defer srv.Close()
			maxSize := int64(len(fullELF) + 1)
			if strings.HasPrefix(tc.name, "oversize") {
				maxSize = int64(len(fullELF) / 2)
			}
			core, logs := observer.New(zapcore.WarnLevel)
			s, err := NewSymbolizer(SymbolizerConfig{
				SystemDebugDir: t.TempDir(),
				CacheDir:       t.TempDir(),
				Debuginfod: debuginfod.Config{
					URLs: []string{srv.URL}, Timeout: time.Second, MaxSize: maxSize,
					Retries: 1, Backoff: 10 * time.Millisecond,
				},
				Getenv: func(string) string { return "" },
				Logger: zap.New(core),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			f, err := os.Open(stripped)
			if err != nil {
				t.Fatal(err)
			}
			bin, err := OpenBinary(f, NewTables(0))
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			fi, _ := f.Stat()
			key, _ := fileKeyOf(fi)
			ref := MappingRef{Path: stripped, Key: key}
			seg := execSegment(t, full)
			off := textAddresses(t, full, 10)[3] - seg.Vaddr + seg.Off

			start := time.Now()
			first := s.Symbolize(ref, bin, off)
			pending, failed := s.FetchPending(id), s.FetchFailed(id)
			close(lookedUp)
			if first.Status != Pending {
				t.Fatalf("first lookup status %v, want pending (never blocking)", first.Status)
			}
			if !pending || failed {
				t.Errorf("first lookup returned after its fetch ended (pending %v, failed %v): it waited for the fetch", pending, failed)
			}
			deadline := time.Now().Add(15 * time.Second)
			for s.FetchPending(id) {
				if time.Now().After(deadline) {
					t.Fatal("fetch still running after 15s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !s.FetchFailed(id) {
				t.Fatalf("failure not cached; stats %+v", s.Stats())
			}
			before := requests.Load()
			l := s.Symbolize(ref, bin, off)
			if l.Status == Pending || (l.Status == Resolved && l.Frames[0].File != "") {
				t.Errorf("after failure: %+v", l)
			}
			if requests.Load() != before {
				t.Errorf("server asked again while the failure is cached")
			}
			st := s.Stats()
			// A body that is not the requested file is a parse failure
			// (README: debug file unusable), the rest fetch failures.
			fetchFailures, parseFailures := int64(1), int64(0)
			if tc.name == "wrong-build-id" || tc.name == "not-elf" {
				fetchFailures, parseFailures = 0, 1
			}
			if st.FetchFailures != fetchFailures || st.ParseFailures != parseFailures || st.NegativeHits == 0 || st.Fetches != 0 {
				t.Errorf("stats %+v: want %d fetch failures, %d parse failures and negative hits", st, fetchFailures, parseFailures)
			}
			if tc.name != "404" && tc.name != "500" && tc.name != "hang" && tc.name != "oversize" && st.FetchBytes == 0 {
				t.Errorf("stats %+v: the bytes of a rejected download are not counted", st)
			}
			if p, _ := filepath.Glob(filepath.Join(s.cfg.CacheDir, ".build-id", "*", "*")); len(p) != 0 {
				t.Errorf("cache holds %v after a failed fetch", p)
			}
			warnings := logs.All()
			for _, e := range warnings {
				t.Logf("warning: %s %v", e.Message, e.ContextMap())
			}
			switch {
			case tc.name == "404" && len(warnings) != 0:
				t.Errorf("%d warnings for a file the server does not have, want none", len(warnings))
			case tc.name != "404" && len(warnings) != 1:
				t.Errorf("%d warnings for the failed fetch, want 1", len(warnings))
			case tc.name != "404":
				if m := warnings[0].ContextMap(); m["build_id"] != id || !strings.Contains(fmt.Sprint(m["error"]), srv.URL) {
					t.Errorf("warning %v does not name build-id %s and server %s", m, id, srv.URL)
				}
			}
			t.Logf("%s: %d requests, failed after %v", tc.name, before, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestCorruptCachedDebugDemoted puts a corrupt copy in the bpfcol cache and
// a good one in a configured debug directory... in the reverse order of
// lookup: the configured directory comes first, so the corrupt file is
// placed there, and the good sibling in the cache must still answer.
func TestCorruptCachedDebugDemoted(t *testing.T) {
	ws := symtest.DWARFWorkloads(t, workloadDir)
	full := ws[0].Path
	stripped := filepath.Join(t.TempDir(), "stripped")
	id := stripCopy(t, full, stripped)
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	debugDir := t.TempDir()
	cacheDir := t.TempDir()
	rel := filepath.Join(".build-id", id[:2], id[2:]+".debug")
	// Corrupt: the headers and notes survive (same build-id) but the DWARF
	// is zeroed.
	corrupt := append([]byte(nil), data...)
	for _, name := range []string{".debug_info", ".debug_abbrev", ".debug_line"} {
		sect := elfSection(t, full, name)
		clear(corrupt[sect.Offset : sect.Offset+sect.Size])
	}
	for dir, content := range map[string][]byte{debugDir: corrupt, cacheDir: data} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewSymbolizer(SymbolizerConfig{
		SystemDebugDir:   t.TempDir(),
		DebugDirectories: []string{debugDir},
		CacheDir:         cacheDir,
		Getenv:           func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, _ := os.Open(stripped)
	bin, err := OpenBinary(f, NewTables(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	fi, _ := f.Stat()
	key, _ := fileKeyOf(fi)
	seg := execSegment(t, full)
	addrs := textAddresses(t, full, 100000)
	want := llvmFrames(t, full, addrs)
	named := 0
	for i, a := range addrs {
		l := s.Symbolize(MappingRef{Path: stripped, Key: key}, bin, a-seg.Vaddr+seg.Off)
		if len(want[i]) > 0 && want[i][0].File != "" && framesEqual(l.Frames, want[i]) {
			named++
		}
	}
	st := s.Stats()
	if named == 0 || st.ParseFailures != 1 || st.LocalHits != 1 {
		t.Fatalf("named %d; stats %+v: want the corrupt copy demoted once and the cached sibling used", named, st)
	}
	// The corrupt copy is remembered: a new lookup path does not parse it again.
	s.tables.closeAll()
	s.Symbolize(MappingRef{Path: stripped, Key: key}, bin, addrs[0]-seg.Vaddr+seg.Off)
	if st2 := s.Stats(); st2.ParseFailures != 1 || st2.NegativeHits == 0 {
		t.Errorf("stats %+v: the bad copy was parsed again", st2)
	}
}
