package testworkload

import (
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

var cpuhogFlags = CPUHogFlags()

// disassemble returns the instructions of one function as objdump prints them.
func disassemble(t *testing.T, bin, fn string) []string {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "objdump"), "-d", "-M", "intel", "--no-show-raw-insn", "--disassemble="+fn, bin).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", fn, err)
	}
	line := regexp.MustCompile(`^\s+[0-9a-f]+:\t(.*)$`)
	var insns []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			insns = append(insns, strings.Join(strings.Fields(m[1]), " "))
		}
	}
	if len(insns) == 0 {
		t.Fatalf("objdump found no instructions for %s in %s", fn, bin)
	}
	return insns
}

func contains(insns []string, re string) bool {
	r := regexp.MustCompile(re)
	for _, in := range insns {
		if r.MatchString(in) {
			return true
		}
	}
	return false
}

func TestCPUHogShape(t *testing.T) {
	bin := BuildC(t, "cpuhog.c", cpuhogFlags...)
	leaf := disassemble(t, bin, "leaf")
	if contains(leaf, `^push rbp`) || contains(leaf, `^call `) {
		t.Errorf("leaf is not a frameless leaf:\n%s", strings.Join(leaf, "\n"))
	}
	middle := disassemble(t, bin, "middle")
	if !contains(middle, `^push rbp$`) || !contains(middle, `^mov rbp,rsp$`) {
		t.Errorf("middle has no frame:\n%s", strings.Join(middle, "\n"))
	}
	if !contains(middle, `^call [0-9a-f]+ <leaf>`) || contains(middle, `^jmp [0-9a-f]+ <leaf>`) {
		t.Errorf("middle does not call leaf (tail call?):\n%s", strings.Join(middle, "\n"))
	}
	if !contains(disassemble(t, bin, "main"), `^call [0-9a-f]+ <middle>`) {
		t.Errorf("main does not call middle")
	}
}

func TestGoHogShape(t *testing.T) {
	bin := BuildGo(t, "gohog")
	out, err := exec.Command("go", "tool", "objdump", "-s", `^main\.(leaf|middle)$`, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool objdump: %v\n%s", err, out)
	}
	text := string(out)
	leafAt := strings.Index(text, "TEXT main.leaf(SB)")
	middleAt := strings.Index(text, "TEXT main.middle(SB)")
	if leafAt < 0 || middleAt < 0 {
		t.Fatalf("main.leaf or main.middle missing:\n%s", text)
	}
	var leaf, middle string
	if leafAt < middleAt {
		leaf, middle = text[leafAt:middleAt], text[middleAt:]
	} else {
		middle, leaf = text[middleAt:leafAt], text[leafAt:]
	}
	if strings.Contains(leaf, "PUSHQ BP") || strings.Contains(leaf, "CALL ") {
		t.Errorf("main.leaf is not a frameless leaf:\n%s", leaf)
	}
	if !strings.Contains(middle, "PUSHQ BP") || !strings.Contains(middle, "CALL main.leaf(SB)") {
		t.Errorf("main.middle has no frame or does not call main.leaf:\n%s", middle)
	}
}

// TestDuration checks every workload stops by itself when given a duration.
func TestDuration(t *testing.T) {
	bins := map[string]string{
		"cpuhog":    BuildC(t, "cpuhog.c", cpuhogFlags...),
		"prologues": BuildC(t, "prologues.c", "-O2"),
		"gohog":     BuildGo(t, "gohog"),
	}
	for name, bin := range bins {
		cmd := Start(t, bin, "0.2")
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s 0.2: %v", name, err)
		}
	}
}

// TestStartKillsAtCleanup checks Start's cleanup ends a workload that runs
// forever.
func TestStartKillsAtCleanup(t *testing.T) {
	bin := BuildC(t, "cpuhog.c", cpuhogFlags...)
	var cmd *exec.Cmd
	t.Run("run", func(t *testing.T) {
		cmd = Start(t, bin)
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("workload not running: %v", err)
		}
	})
	if cmd.ProcessState == nil {
		t.Fatalf("workload not reaped at cleanup")
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("workload ended with %v, want SIGKILL", cmd.ProcessState)
	}
}
