package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// bootResult is one guest's report and how long it took.
type bootResult struct {
	report   *guestReport
	bootTime time.Duration // from starting qemu to the run script
	runTime  time.Duration // from the run script to its end
	err      error         // qemu failed or was stopped by the watchdog
}

// boot runs the guest of t on initrd under qemu, writing its console to
// logPath. The watchdog kills qemu after timeout.
func boot(t target, k kernel, initrd, nonce string, suites []suite, memMiB int, timeout time.Duration, logPath string) bootResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{}, t.machine...)
	args = append(args,
		"-smp", "2", "-m", strconv.Itoa(memMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", k.image, "-initrd", initrd,
		// panic=-1 reboots at once on a panic, and -no-reboot turns that
		// into qemu exiting.
		"-append", "console="+t.console+" panic=-1 quiet",
	)
	cmd := exec.CommandContext(ctx, t.qemu, args...)
	cmd.Stdin = nil
	logFile, err := os.Create(logPath)
	if err != nil {
		return bootResult{report: &guestReport{}, err: err}
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "# %s %v\n", t.qemu, args)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return bootResult{report: &guestReport{}, err: err}
	}
	cmd.Stderr = logFile
	p := newConsoleParser(nonce, suites)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return bootResult{report: p.finish(), err: fmt.Errorf("starting %s: %w", t.qemu, err)}
	}
	var res bootResult
	var booted time.Time
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		_, _ = io.WriteString(logFile, sc.Text()+"\n")
		switch p.line(sc.Text()) {
		case "boot":
			booted = time.Now()
			res.bootTime = booted.Sub(start)
		case "done":
			res.runTime = time.Since(booted)
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed by the watchdog after %s", timeout)
	}
	res.report = p.finish()
	if !booted.IsZero() && res.runTime == 0 {
		res.runTime = time.Since(booted)
	}
	res.err = err
	return res
}
