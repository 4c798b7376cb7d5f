package e2e

import (
	"debug/elf"
	"debug/gosym"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// peerProfiler returns the OpenTelemetry eBPF profiler's path
// (BPFCOL_PEER_PROFILER), or skips t through testenv.
func peerProfiler(t testing.TB) string {
	t.Helper()
	p := testenv.PeerProfiler(t)
	testenv.LookPath(t, "unshare") // to mount tracefs for it
	return p
}

// startPeer runs the peer at hz with reports every report, exporting OTLP
// to endpoint. It needs tracefs, which the host may not have mounted: it
// runs in a private mount namespace that mounts it. The shell execs the
// peer, so cmd's pid is the peer's. It is stopped with SIGINT, its way to
// shut down, at cleanup.
func startPeer(t testing.TB, bin, endpoint string, hz int, report time.Duration) *runningCollector {
	t.Helper()
	return startRunning(t, exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tracefs tracefs /sys/kernel/tracing && exec "$0" "$@"`, bin,
		"-collection-agent", endpoint, "-disable-tls",
		"-samples-per-second", strconv.Itoa(hz),
		"-reporter-interval", report.String(), "-reporter-jitter", "0"), syscall.SIGINT)
}

// TestPeerExportDecodes checks that the OTLP server of the tests, built at
// our pdata version, decodes what the peer sends at its own: the peer's
// samples of a C and a Go workload are checked against the binaries
// themselves. Each native frame's mapping and address must fall in a
// function of the C binary's symbol table, leaf first; each Go frame's
// name must be the function Go's own line table (debug/gosym) gives for
// its address; thread and process attributes must be the workloads'; and
// samples, which carry timestamps and no value, count one per timestamp.
func TestPeerExportDecodes(t *testing.T) {
	testenv.RequireBPF(t)
	peerBin := peerProfiler(t)
	cBin := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)
	goBin := testworkload.BuildGo(t, "gohog")
	cPID := int64(testworkload.Start(t, cBin).Process.Pid)
	goPID := int64(testworkload.Start(t, goBin).Process.Pid)
	server := startProfilesServer(t)
	startPeer(t, peerBin, server.addr, 49, time.Second)

	const want = 100 // samples of each workload
	var samples []pprofiletest.Sample
	count := func(pid int64) (n int64) {
		for _, s := range samples {
			if s.PID == pid {
				n += s.Count
			}
		}
		return n
	}
	for deadline := time.Now().Add(90 * time.Second); count(cPID) < want || count(goPID) < want; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the peer sent %d samples of the C workload and %d of the Go one in 90s, want %d each", count(cPID), count(goPID), want)
		}
		samples = samples[:0]
		for _, p := range server.all() {
			samples = append(samples, pprofiletest.Samples(p)...)
		}
	}

	cFuncs := elfFunctions(t, cBin)
	goFuncs := goFunctions(t, goBin)
	var cLeaf, cTotal int64
	for _, s := range samples {
		if s.PID != cPID && s.PID != goPID {
			continue
		}
		if s.Count != int64(len(s.Timestamps)) || s.Count == 0 {
			t.Fatalf("a sample of pid %d counts %d with %d timestamps", s.PID, s.Count, len(s.Timestamps))
		}
		if len(s.ThreadIDs) != 1 || s.SampleType != "samples/count" {
			t.Fatalf("a sample of pid %d has thread ids %v and type %q", s.PID, s.ThreadIDs, s.SampleType)
		}
		var user []string // the C binary's functions, leaf first
		for i, name := range s.Names {
			switch {
			case s.Types[i] == conventions.FrameTypeKernel:
			case s.PID == goPID:
				if s.Types[i] != conventions.FrameTypeGo || s.Files[i] != filepath.Base(goBin) {
					t.Fatalf("a frame of the Go workload is typed %q in %q: %v", s.Types[i], s.Files[i], s.Names)
				}
				// A return address has 1 subtracted, the name is of the
				// address itself: they differ where a call is the last
				// instruction of a function, before a signal trampoline.
				if got := goFuncs(s.Addrs[i]); got != name && goFuncs(s.Addrs[i]+1) != name {
					t.Fatalf("the peer names the Go frame at %#x %q, Go's line table %q", s.Addrs[i], name, got)
				}
			case s.Files[i] == filepath.Base(cBin):
				fn := cFuncs(s.Addrs[i])
				if s.Types[i] != conventions.FrameTypeNative || fn == "" {
					t.Fatalf("the C workload's frame at %#x, typed %q, is in no function of its symbol table", s.Addrs[i], s.Types[i])
				}
				user = append(user, fn)
			}
		}
		if s.PID == cPID {
			if s.Labels[conventions.ThreadName] != filepath.Base(cBin) || s.ThreadIDs[0] != cPID {
				t.Fatalf("a sample of the C workload (pid %d) is of thread %d named %q", cPID, s.ThreadIDs[0], s.Labels[conventions.ThreadName])
			}
			cTotal += s.Count
			if len(user) >= 3 && slices.Equal(user[:3], []string{"leaf", "middle", "main"}) {
				cLeaf += s.Count
			}
		}
	}
	// The workload spends its time in leaf, called by middle from main.
	if cLeaf*10 < cTotal*9 {
		t.Errorf("%d of the C workload's %d samples read leaf;middle;main in its binary, want at least 90%%", cLeaf, cTotal)
	}
	t.Logf("%d of %d C samples read leaf;middle;main; %d Go samples checked against the line table", cLeaf, cTotal, count(goPID))
}

// elfFunctions returns the function of bin's symbol table holding an
// address, or "".
func elfFunctions(t *testing.T, bin string) func(uint64) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return func(addr uint64) string {
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && addr >= s.Value && addr < s.Value+s.Size {
				return s.Name
			}
		}
		return ""
	}
}

// goFunctions returns the function Go's line table of bin gives for an
// address, or "".
func goFunctions(t *testing.T, bin string) func(uint64) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcln, err := f.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, f.Section(".text").Addr))
	if err != nil {
		t.Fatal(err)
	}
	return func(addr uint64) string {
		if fn := table.PCToFunc(addr); fn != nil {
			return fn.Name
		}
		return ""
	}
}
