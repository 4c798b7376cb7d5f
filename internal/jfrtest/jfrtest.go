// Package jfrtest reads back, in tests, the execution samples a JDK Flight
// Recorder recording holds, through the JDK's own jfr tool: the JVM's own
// sampler is the ground truth Java frames are checked against.
package jfrtest

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bpfcol/bpfcol/internal/testenv"
)

// Frame is one Java frame of a sample.
type Frame struct {
	// Class is the class's name with dots (java.lang.String), Method
	// the method's, Descriptor its JVM descriptor ("(J)J").
	Class, Method, Descriptor string
	Line, BCI                 int
	// Type is how the frame ran: "Interpreted", "JIT compiled",
	// "Inlined" (into the frame after it), "Native".
	Type string
}

// Name is the frame's class and method: "JavaChain.chainLeaf".
func (f Frame) Name() string { return f.Class + "." + f.Method }

// Sample is one execution sample: a Java thread's stack, leaf first.
type Sample struct {
	Time time.Time
	// TID is the thread's id in the kernel.
	TID       int
	Thread    string
	Frames    []Frame
	Truncated bool
}

// Flag is the JVM option that records the execution samples of a run
// into file, every 10 ms per thread (JFR's "profile" settings), and writes
// them when the JVM exits.
func Flag(file string) string {
	return "-XX:StartFlightRecording=filename=" + file + ",settings=profile,dumponexit=true"
}

// Read returns the execution samples of the recording in file.
func Read(t testing.TB, file string) []Sample {
	t.Helper()
	jfr := testenv.LookPath(t, "jfr")
	out, err := exec.Command(jfr, "print", "--json", "--events", "jdk.ExecutionSample", file).Output()
	if err != nil {
		t.Fatalf("reading %s with jfr: %v", file, err)
	}
	samples, err := parse(out)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	return samples
}

// recording is the part of `jfr print --json` read.
type recording struct {
	Recording struct {
		Events []struct {
			Type   string `json:"type"`
			Values struct {
				StartTime     time.Time `json:"startTime"`
				SampledThread struct {
					OSName     string `json:"osName"`
					OSThreadID int    `json:"osThreadId"`
				} `json:"sampledThread"`
				StackTrace struct {
					Truncated bool `json:"truncated"`
					Frames    []struct {
						Method struct {
							Type struct {
								Name string `json:"name"`
							} `json:"type"`
							Name       string `json:"name"`
							Descriptor string `json:"descriptor"`
						} `json:"method"`
						LineNumber    int    `json:"lineNumber"`
						BytecodeIndex int    `json:"bytecodeIndex"`
						Type          string `json:"type"`
					} `json:"frames"`
				} `json:"stackTrace"`
			} `json:"values"`
		} `json:"events"`
	} `json:"recording"`
}

func parse(out []byte) ([]Sample, error) {
	var r recording
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("decoding jfr's JSON: %w", err)
	}
	var samples []Sample
	for _, e := range r.Recording.Events {
		if e.Type != "jdk.ExecutionSample" {
			continue
		}
		v := e.Values
		s := Sample{Time: v.StartTime, TID: v.SampledThread.OSThreadID, Thread: v.SampledThread.OSName, Truncated: v.StackTrace.Truncated}
		for _, f := range v.StackTrace.Frames {
			s.Frames = append(s.Frames, Frame{
				Class: strings.ReplaceAll(f.Method.Type.Name, "/", "."), Method: f.Method.Name, Descriptor: f.Method.Descriptor,
				Line: f.LineNumber, BCI: f.BytecodeIndex, Type: f.Type,
			})
		}
		samples = append(samples, s)
	}
	return samples, nil
}
