package main

import "github.com/bpfcol/bpfcol/internal/testworkload"

// target is one kernel on one architecture, booted under emulation.
type target struct {
	// name is how -targets names it.
	name string
	// arch is the architecture as the summary line spells it.
	arch string
	// debArch is Debian's name of the architecture, goarch Go's.
	debArch, goarch string
	// kernelPackage is the Debian meta-package whose dependency is the
	// kernel image to boot (the current ABI of that series).
	kernelPackage string
	// qemu and its machine arguments; console is the guest's serial
	// console device.
	qemu    string
	machine []string
	console string
	// toolchain builds the workloads; libDirs hold the shared libraries
	// they are linked against.
	toolchain testworkload.Toolchain
	libDirs   []string
	// hostTools are the host's programs that tests run as their ground
	// truth (objdump, readelf) or to drop capabilities (capsh), copied
	// in with their libraries: only where the host's architecture is the
	// guest's.
	hostTools []string
	// debTools are such programs taken from Debian's packages of the
	// guest's architecture, unpacked, never installed; libPackages hold
	// the shared libraries they need beyond libDirs'.
	debTools    []debTool
	libPackages []string
}

// debTool is a program in a Debian package: its path there and in the
// guest.
type debTool struct {
	pkg, path string
}

var x86Tools = []string{"capsh", "objdump", "readelf"}

var x86Toolchain = testworkload.Toolchain{CC: "gcc", CXX: "g++", MuslCC: "musl-gcc", Rustc: "rustc", GOARCH: "amd64"}

// x86Machine: nested KVM does not work on the machines this runs on, so
// every target is emulated (TCG), with the newest CPU model qemu has.
// -nodefaults drops the network card, whose boot ROM costs seconds.
//
// thread=single runs both vCPUs on one host thread. With a thread each
// (MTTCG, qemu 7.2), attaching or detaching a sched_switch program, which
// patches a static key in __schedule, hung 3 of 19 boots of 6.1: both
// vCPUs looped on the int3 of the patch (exc_int3, RIPs read from qemu's
// monitor), and 6.12 once oopsed there. On one thread 28 of 28 passed.
var x86Machine = []string{"-accel", "tcg,thread=single", "-cpu", "max"}

// arm64Machine: pauth-impdef replaces the architected pointer
// authentication, very slow to emulate, with qemu's cheap one. thread=single
// as on x86-64: with a thread per vCPU, the off-CPU program attached to
// sched_switch ran at no switch at all in 2 of 17 boots.
var arm64Machine = []string{"-M", "virt", "-accel", "tcg,thread=single", "-cpu", "max,pauth-impdef=on"}

var targets = []target{
	{
		name: "x86_64-6.1", arch: "x86_64", debArch: "amd64", goarch: "amd64",
		kernelPackage: "linux-image-cloud-amd64",
		qemu:          "qemu-system-x86_64", machine: x86Machine, console: "ttyS0",
		toolchain: x86Toolchain, libDirs: []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"},
		hostTools: x86Tools,
	},
	{
		name: "x86_64-6.12", arch: "x86_64", debArch: "amd64", goarch: "amd64",
		kernelPackage: "linux-image-6.12-cloud-amd64",
		qemu:          "qemu-system-x86_64", machine: x86Machine, console: "ttyS0",
		toolchain: x86Toolchain, libDirs: []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"},
		hostTools: x86Tools,
	},
	{
		name: "arm64-6.1", arch: "arm64", debArch: "arm64", goarch: "arm64",
		kernelPackage: "linux-image-cloud-arm64",
		qemu:          "qemu-system-aarch64", machine: arm64Machine, console: "ttyAMA0",
		toolchain: testworkload.ARM64Toolchain, libDirs: []string{"/usr/aarch64-linux-gnu/lib"},
		debTools: []debTool{{pkg: "libcap2-bin", path: "sbin/capsh"}}, libPackages: []string{"libcap2"},
	},
}
