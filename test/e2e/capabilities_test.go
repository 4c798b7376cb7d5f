package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/process"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// minimalCapabilities is the set deploy/ and README.md document for the
// DaemonSet; CAP_SYS_RESOURCE is only for kernels before 5.11 and this
// machine cannot grant it.
var minimalCapabilities = []string{"cap_bpf", "cap_perfmon", "cap_sys_ptrace", "cap_checkpoint_restore", "cap_dac_read_search"}

// allCapabilities lists the bounding set of this process, by capsh names.
func allCapabilities(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("capsh", "--print").Output()
	if err != nil {
		t.Fatalf("capsh (Debian package libcap2-bin) is needed: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "Bounding set ="); ok {
			return strings.Split(strings.TrimSpace(rest), ",")
		}
	}
	t.Fatalf("no bounding set in capsh --print:\n%s", out)
	return nil
}

// startCollectorWithCaps runs bin/bpfcol as root with only keep in its
// capability sets.
func startCollectorWithCaps(t *testing.T, config string, keep []string) *runningCollector {
	t.Helper()
	var drop []string
	for _, c := range allCapabilities(t) {
		if !contains(keep, c) {
			drop = append(drop, c)
		}
	}
	bin := collectorBinary(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &runningCollector{output: &lockedBuffer{}, done: make(chan error, 1), stopSignal: syscall.SIGTERM}
	c.cmd = exec.Command("capsh", "--drop="+strings.Join(drop, ","), "--", "-c", fmt.Sprintf("exec %s --config %s", bin, cfgPath))
	c.cmd.Stdout, c.cmd.Stderr = c.output, c.output
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() { _ = c.stop() })
	return c
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func without(list []string, s string) []string {
	var out []string
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}

// namedChain waits up to d until enough samples of pid arrived: 10 with
// chain named when named is set, else 50 of any kind. It returns how many
// samples of pid there were and how many carried chain by name.
func namedChain(server *profilesServer, pid int64, chain []string, named bool, d time.Duration) (ofPID, withChain int64) {
	deadline := time.Now().Add(d)
	for {
		ofPID, withChain = 0, 0
		for _, p := range server.all() {
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != pid {
					continue
				}
				ofPID += s.Count
				if s.HasChain(chain) {
					withChain += s.Count
				}
			}
		}
		if (named && withChain >= 10) || (!named && ofPID >= 50) || time.Now().After(deadline) {
			return ofPID, withChain
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestCapabilities checks that every documented capability is needed:
// with the minimal set bpfcol names a workload's frames; without CAP_BPF
// or CAP_PERFMON it fails naming the capability; without the others it
// degrades as documented.
func TestCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBPF(t)
	chain := []string{"leaf", "middle", "main"}
	hog := testworkload.BuildC(t, "cpuhog.c", testworkload.CPUHogFlags()...)

	// workload returns how each case runs the workload: a plain process
	// (full capabilities, so reading its /proc files needs CAP_SYS_PTRACE),
	// a deleted binary (only /proc/PID/map_files reaches it), or a binary
	// only its owner may read (needs CAP_DAC_READ_SEARCH).
	plain := func(t *testing.T) int64 { return int64(testworkload.Start(t, hog).Process.Pid) }
	deleted := func(t *testing.T) int64 {
		bin := filepath.Join(t.TempDir(), "cpuhog-deleted")
		copyFile(t, hog, bin, 0o755)
		pid := int64(testworkload.Start(t, bin).Process.Pid)
		// Deleted once the process runs it (exec done), not before.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if exe, err := process.ExecutablePath(int(pid)); err == nil && exe == bin {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d does not run %s after 10 s", pid, bin)
			}
		}
		if err := os.Remove(bin); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	unreadable := func(t *testing.T) int64 {
		dir := t.TempDir()
		bin := filepath.Join(dir, "cpuhog-private")
		copyFile(t, hog, bin, 0o711)
		// Owned by nobody, readable by nobody else: root runs it (exec
		// needs only x) but opening it needs CAP_DAC_READ_SEARCH.
		if err := os.Chown(bin, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		return int64(testworkload.Start(t, bin).Process.Pid)
	}

	cases := []struct {
		name     string
		keep     []string
		workload func(*testing.T) int64
		// failure is the error bpfcol must exit with; "" means it runs.
		failure string
		// named says whether the workload's frames must carry names.
		named bool
	}{
		{"minimal set", minimalCapabilities, plain, "", true},
		{"minimal set, deleted binary", minimalCapabilities, deleted, "", true},
		{"minimal set, unreadable binary", minimalCapabilities, unreadable, "", true},
		{"without cap_bpf", without(minimalCapabilities, "cap_bpf"), plain, "missing capability CAP_BPF", false},
		{"without cap_perfmon", without(minimalCapabilities, "cap_perfmon"), plain, "missing capability CAP_PERFMON", false},
		{"without cap_sys_ptrace", without(minimalCapabilities, "cap_sys_ptrace"), plain, "", false},
		{"without cap_checkpoint_restore", without(minimalCapabilities, "cap_checkpoint_restore"), deleted, "", false},
		{"without cap_dac_read_search", without(minimalCapabilities, "cap_dac_read_search"), unreadable, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			server := startProfilesServer(t)
			pid := tc.workload(t)
			col := startCollectorWithCaps(t, profilesConfig(server.addr), tc.keep)
			if tc.failure != "" {
				select {
				case err := <-col.done:
					col.done <- err
					if err == nil || !strings.Contains(col.output.String(), tc.failure) {
						t.Fatalf("want exit with %q, got %v:\n%s", tc.failure, err, col.output)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("still running without the capability:\n%s", col.output)
				}
				return
			}
			ofPID, named := namedChain(server, pid, chain, tc.named, 60*time.Second)
			if done, err := col.exited(); done {
				t.Fatalf("collector exited: %v\n%s", err, col.output)
			}
			t.Logf("%d samples of the workload, %d with %v named", ofPID, named, chain)
			if ofPID == 0 {
				t.Fatalf("no samples of the workload at all:\n%s", col.output)
			}
			if tc.named && named < 10 {
				t.Fatalf("frames not named with the capability")
			}
			if !tc.named && named > 0 {
				t.Fatalf("frames named without the capability: the docs overstate what it is needed for")
			}
		})
	}
}

// TestErrorModeIgnore drops CAP_BPF with error_mode: ignore: the receiver
// logs why it did not start and the collector keeps running.
func TestErrorModeIgnore(t *testing.T) {
	testenv.RequireRoot(t)
	server := startProfilesServer(t)
	cfg := strings.Replace(profilesConfig(server.addr), "report_interval: 1s", "report_interval: 1s\n    error_mode: ignore", 1)
	col := startCollectorWithCaps(t, cfg, without(minimalCapabilities, "cap_bpf"))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(col.output.String(), "Everything is ready") {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited with error_mode ignore: %v\n%s", err, col.output)
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not ready after 20s:\n%s", col.output)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := col.output.String()
	if strings.Count(out, "missing capability CAP_BPF") != 1 || !strings.Contains(out, "error_mode is ignore") {
		t.Fatalf("want the reason logged once:\n%s", out)
	}
	// An expected condition: one line, no Go stack trace (zap's console
	// encoder puts one frame per "\tFILE.go:LINE" line).
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "\t") && strings.Contains(l, ".go:") {
			t.Fatalf("a stack trace was logged:\n%s", out)
		}
	}
}

// TestCapabilitiesBothReceivers runs both receivers in one collector, as
// config/local.yaml and the DaemonSet do: they share a map of open probe
// scopes, created at start. Without CAP_BPF or CAP_PERFMON the collector
// must still exit naming the capability, whichever receiver starts first,
// not with the map creation's bare "operation not permitted".
func TestCapabilitiesBothReceivers(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBPF(t)
	const config = `receivers:
  ebpfprof: {}
  uprobe:
    probes:
      - id: dns_lookup
        file_match: '/libc\.so\.6$'
        entry: getaddrinfo
exporters:
  debug: {}
service:
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [debug]
    logs:
      receivers: [uprobe]
      exporters: [debug]
`
	for _, c := range []struct{ drop, failure string }{
		{"cap_bpf", "missing capability CAP_BPF"},
		{"cap_perfmon", "missing capability CAP_PERFMON"},
	} {
		t.Run("without "+c.drop, func(t *testing.T) {
			col := startCollectorWithCaps(t, config, without(minimalCapabilities, c.drop))
			select {
			case err := <-col.done:
				col.done <- err
				out := col.output.String()
				if err == nil || !strings.Contains(out, c.failure) {
					t.Fatalf("want exit with %q, got %v:\n%s", c.failure, err, out)
				}
				if strings.Contains(out, "operation not permitted") {
					t.Fatalf("the exit names the kernel's refusal, not the capability:\n%s", out)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("still running without the capability:\n%s", col.output)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}
