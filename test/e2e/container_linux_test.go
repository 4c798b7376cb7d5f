package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/bpfcol/bpfcol/internal/conventions"
	"github.com/bpfcol/bpfcol/internal/pprofiletest"
	"github.com/bpfcol/bpfcol/internal/testenv"
	"github.com/bpfcol/bpfcol/internal/testworkload"
)

// The environment of TestContainerInit, set only by startContainer.
const (
	containerInitEnv   = "BPFCOL_TEST_CONTAINER_INIT"
	containerRootEnv   = "BPFCOL_TEST_CONTAINER_ROOT"
	containerBinEnv    = "BPFCOL_TEST_CONTAINER_BIN"
	containerCgroupEnv = "BPFCOL_TEST_CONTAINER_CGROUP"
)

// cgroup2Root returns where the cgroup v2 hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[2] == "cgroup2" {
			return fields[1]
		}
	}
	testenv.Unavailable(t, "cgroup v2 is not mounted")
	return ""
}

// startContainer runs bin as a container runtime would: in new PID and
// mount namespaces, in a cgroup v2 group named after a fresh 64-hex-digit
// container id (as docker names its scopes), with its own root (pivot_root,
// the old root unmounted) holding only bin at /app/<name> on a tmpfs of its
// own and an empty /tmp on another: no path of the host leads to them. It
// returns the process's pid on the host and the container id.
func startContainer(t *testing.T, bin string) (pid int, id string) {
	t.Helper()
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		t.Fatal(err)
	}
	id = hex.EncodeToString(raw[:])
	parent := filepath.Join(cgroup2Root(t), "bpfcol-test-"+id[:8])
	group := filepath.Join(parent, "docker-"+id+".scope")
	if err := os.MkdirAll(group, 0o755); err != nil {
		testenv.Unavailable(t, "creating a cgroup v2 group: "+err.Error())
	}
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestContainerInit$", "-test.count=1")
	cmd.Env = append(os.Environ(), containerInitEnv+"=1", containerRootEnv+"="+root, containerBinEnv+"="+bin, containerCgroupEnv+"="+group)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	out := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		testenv.Unavailable(t, "starting a process in new PID and mount namespaces: "+err.Error())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && out.String() != "" {
			t.Logf("the container's output:\n%s", out)
		}
		for _, d := range []string{group, parent} {
			for try := 0; try < 50; try++ {
				if err := os.Remove(d); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	// Running the workload: its executable is the container's.
	deadline := time.Now().Add(10 * time.Second)
	for {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
		if exe == "/app/"+filepath.Base(bin) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not start %s (exe %q):\n%s", bin, exe, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd.Process.Pid, id
}

// TestContainerInit is the container's init, run by startContainer in
// new namespaces: it joins its cgroup, builds its root, pivots into it and
// execs the workload. It does nothing in a normal run.
func TestContainerInit(t *testing.T) {
	if os.Getenv(containerInitEnv) != "1" {
		return
	}
	root, bin, group := os.Getenv(containerRootEnv), os.Getenv(containerBinEnv), os.Getenv(containerCgroupEnv)
	must := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "container init: %s: %v\n", what, err)
			os.Exit(1)
		}
	}
	must("joining the cgroup", os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte("0"), 0))
	must("making mounts private", syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""))
	must("binding the root", syscall.Mount(root, root, "", syscall.MS_BIND, ""))
	for _, d := range []string{"app", "tmp", "old"} {
		must("making /"+d, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	must("mounting /app", syscall.Mount("tmpfs", filepath.Join(root, "app"), "tmpfs", 0, "mode=755"))
	must("mounting /tmp", syscall.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", 0, "mode=1777"))
	dst := filepath.Join(root, "app", filepath.Base(bin))
	in, err := os.Open(bin)
	must("opening the workload", err)
	o, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	must("copying the workload", err)
	_, err = io.Copy(o, in)
	must("copying the workload", err)
	must("copying the workload", o.Close())
	must("entering the root", os.Chdir(root))
	must("pivoting", syscall.PivotRoot(".", "old"))
	must("entering the new root", os.Chdir("/"))
	must("unmounting the old root", syscall.Unmount("/old", syscall.MNT_DETACH))
	must("exec", syscall.Exec("/app/"+filepath.Base(bin), []string{filepath.Base(bin)}, nil))
}

// containerConfig runs both receivers; the uprobe receiver probes
// ctr_call in a binary that only exists inside a container.
func containerConfig(profiles, logs string) string {
	return fmt.Sprintf(`
receivers:
  ebpfprof:
    sampling_frequency: 99
    report_interval: 1s
  uprobe:
    probes:
      - id: ctr
        file_match: '/app/ctrhog$'
        entry: ctr_call
        exit: return
exporters:
  otlp_grpc/profiles:
    endpoint: %s
    tls:
      insecure: true
  otlp_grpc/logs:
    endpoint: %s
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprof]
      exporters: [otlp_grpc/profiles]
    logs:
      receivers: [uprobe]
      exporters: [otlp_grpc/logs]
`, profiles, logs)
}

// TestContainerProcess runs bin/bpfcol over a process in a container
// (startContainer: its own PID and mount namespaces and root, a cgroup v2
// group named after its id) whose executable exists only inside it: its
// profiles and its scope records carry its container.id and executable
// (/app/ctrhog, as the container sees it); its frames are named from that
// file (leaf, middle, main through the whole chain), its JIT code from the
// perf map it wrote in its own /tmp under its own pid in its namespace
// (/proc/PID/root/tmp/perf-1.map); and its probed function, in a binary
// found only through the process, is recorded.
func TestContainerProcess(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.RequireRoot(t)
	built := testworkload.BuildC(t, "ctrhog.c", "-O2", "-g", "-static", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	bin := filepath.Join(t.TempDir(), "ctrhog")
	if err := copyExecutable(built, bin); err != nil {
		t.Fatal(err)
	}
	profiles, logs := startProfilesServer(t), startLogsServer(t)
	col := startCollector(t, containerConfig(profiles.addr, logs.addr))
	for !strings.Contains(col.output.String(), "uprobe receiver started") {
		if done, err := col.exited(); done {
			t.Fatalf("collector exited: %v\n%s", err, col.output)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid, id := startContainer(t, bin)
	// The host's copy goes: the file the process runs is the container's
	// only.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	t.Logf("container process: host pid %d, %s", pid, strings.TrimSpace(grepLine(string(status), "NSpid:")))

	chain := []string{"leaf", "middle", "main"}
	jitChain := []string{"jit_hot", "main"}
	var inLeaf, withChain, inJIT, withJIT, records int64
	var resources []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		inLeaf, withChain, inJIT, withJIT, records, resources = 0, 0, 0, 0, 0, nil
		seen := map[string]bool{}
		note := func(kind string, attrs pcommon.Map) {
			c, _ := attrs.Get(conventions.ContainerID)
			p, _ := attrs.Get(conventions.ProcessExecutablePath)
			n, _ := attrs.Get(conventions.ProcessExecutableName)
			r := fmt.Sprintf("%s: container.id=%s path=%s name=%s", kind, c.Str(), p.Str(), n.Str())
			if !seen[r] {
				seen[r] = true
				resources = append(resources, r)
			}
		}
		for _, p := range profiles.all() {
			for i := 0; i < p.ResourceProfiles().Len(); i++ {
				attrs := p.ResourceProfiles().At(i).Resource().Attributes()
				if v, ok := attrs.Get(conventions.ProcessPID); ok && v.Int() == int64(pid) {
					note("profiles", attrs)
				}
			}
			for _, s := range pprofiletest.Samples(p) {
				if s.PID != int64(pid) {
					continue
				}
				names := s.UserNames()
				switch {
				case len(names) > 0 && names[0] == "leaf":
					inLeaf += s.Count
					if s.HasChain(chain) {
						withChain += s.Count
					}
				case len(names) > 0 && names[0] == "jit_hot":
					inJIT += s.Count
					if s.HasChain(jitChain) {
						withJIT += s.Count
					}
				}
			}
		}
		for _, l := range logs.all() {
			for i := 0; i < l.ResourceLogs().Len(); i++ {
				rl := l.ResourceLogs().At(i)
				if v, ok := rl.Resource().Attributes().Get(conventions.ProcessPID); !ok || v.Int() != int64(pid) {
					continue
				}
				note("logs", rl.Resource().Attributes())
				for j := 0; j < rl.ScopeLogs().Len(); j++ {
					records += int64(rl.ScopeLogs().At(j).LogRecords().Len())
				}
			}
		}
		if inLeaf >= 50 && inJIT >= 5 && records >= 100 {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	slices.Sort(resources)
	t.Logf("%d of %d samples in leaf carry %v; %d of %d samples in the JIT code carry %v; %d scope records; resources: %v",
		withChain, inLeaf, chain, withJIT, inJIT, jitChain, records, resources)
	if inLeaf < 50 || withChain*100 < inLeaf*95 {
		t.Errorf("%d of %d samples in leaf carry %v, want at least 95%% of at least 50", withChain, inLeaf, chain)
	}
	if inJIT < 5 || withJIT*100 < inJIT*95 {
		t.Errorf("%d of %d samples named by the container's perf map carry %v, want at least 95%% of at least 5", withJIT, inJIT, jitChain)
	}
	if records < 100 {
		t.Errorf("%d scope records of ctr_call, in a binary only the container holds", records)
	}
	want := []string{
		"logs: container.id=" + id + " path=/app/ctrhog name=ctrhog",
		"profiles: container.id=" + id + " path=/app/ctrhog name=ctrhog",
	}
	if !slices.Equal(resources, want) {
		t.Errorf("resources of the container's process: %v, want %v", resources, want)
	}
}

func grepLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
