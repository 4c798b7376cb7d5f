#!/usr/bin/env bash
# Installs the system tools bpfcol needs to build and test, and only those that
# are missing: every check is a `command -v` or a file test, so a second run
# does nothing and never touches the network.
#
#   scripts/install-deps.sh          tools for `make build/generate/test`
#   scripts/install-deps.sh --bench  the above plus the `make bench` extras
#   scripts/install-deps.sh --vm     the above plus `make vmtest`'s arm64
#                                    emulator and cross compilers (adds
#                                    Debian's arm64 architecture to apt)
#
# Debian/Ubuntu only (apt-get). Needs root when something is missing.
set -euo pipefail

bench=false
vm=false
case "${1:-}" in
"") ;;
--bench) bench=true ;;
--vm) vm=true ;;
*)
	echo "usage: $0 [--bench|--vm]" >&2
	exit 2
	;;
esac

# Each entry is "check package": the check is a command looked up in PATH, or
# an absolute path that must exist (for header-only packages).
required=(
	"clang clang"                                 # compiles the BPF C programs (bpf2go)
	"llvm-strip llvm"                             # bpf2go strips the BPF objects
	"llvm-symbolizer llvm"                        # ground truth for symbolization tests
	"llvm-dwarfdump llvm"                         # ground truth for CFI tables (with readelf)
	"python3.11 python3.11"                       # a real distribution program (CFI tables)
	"/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 libsqlite3-0" # python3.11's sqlite3, a library loaded late (uprobe tests)
	"node nodejs"                                 # a ~100 MB C++ binary probed by demangled name (uprobe tests)
	"javac openjdk-17-jdk-headless"               # HotSpot JVM workloads (java, javac), and JFR (jfr) as their ground truth
	"jfr openjdk-17-jdk-headless"
	"getent libc-bin"                             # short processes calling getaddrinfo (uprobe tests)
	"/usr/include/bpf/bpf_helpers.h libbpf-dev"   # BPF helper headers
	"/usr/include/linux/bpf.h linux-libc-dev"     # kernel UAPI headers
	"bpftool bpftool"                             # BTF dumps, inspecting loaded programs
	"eu-readelf elfutils"                         # eu-* tools: ELF/DWARF ground truth
	"eu-stack elfutils"
	"debuginfod debuginfod"                       # local debuginfod server for tests
	"debuginfod-find debuginfod"
	"addr2line binutils"                          # addr2line, nm, readelf, objdump
	"nm binutils"
	"readelf binutils"
	"gcc gcc"                                     # C test workloads
	"musl-gcc musl-tools"                         # C test workloads on musl libc
	"g++ g++"                                     # C++ test workloads
	"objcopy binutils"                            # stripped copies of test binaries
	"unshare util-linux"                          # mount-namespace symbolization test
	"capsh libcap2-bin"                           # capability-dropping tests
	"strace strace"                               # tests that watch which files a process opens
	"/usr/bin/python3.11 python3.11"              # real programs unwound by CFI (ebpfprof)
	"/usr/bin/xz xz-utils"
	"/usr/bin/gzip gzip"
	"/usr/bin/sqlite3 sqlite3"
	"perf linux-perf"                             # perf --call-graph dwarf: the CFI tests' yardstick
	"/usr/share/doc/libc6-dbg libc6-dbg"            # names libc's local start code (__libc_start_call_main)
	"/usr/include/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)/sys/sdt.h systemtap-sdt-dev" # USDT probes in workloads
	"qemu-system-x86_64 qemu-system-x86"          # make test boots Debian's 6.1 kernel (test/vmtest)
	"cpio cpio"                                   # reads back test/vmtest's initramfs in its unit test
	"apt-get apt"                                 # test/vmtest fetches kernels with apt-get download
	"dpkg-deb dpkg"                               # ... and unpacks them
	"aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu" # arm64 code for the CFI and frameless-leaf tests (and make vmtest's arm64 workloads)
	"aarch64-linux-gnu-objdump binutils-aarch64-linux-gnu" # their yardstick
	"/usr/aarch64-linux-gnu/lib/libstdc++.so.6 libstdc++6-arm64-cross" # arm64 C++ CFI, against readelf
)
if $vm; then
	required+=(
		"qemu-system-aarch64 qemu-system-arm"     # the arm64 target of make vmtest
		"aarch64-linux-gnu-g++ g++-aarch64-linux-gnu"
		"/usr/include/aarch64-linux-gnu/sys/sdt.h systemtap-sdt-dev:arm64" # USDT workloads
	)
fi
optional=() # failing to install these is a warning, not an error
if $bench; then
	optional+=(
		"perf linux-perf" # comparison profiles in benchmarks
		"node nodejs"     # a ~100 MB binary for the CFI table benchmark
		"bpftrace bpftrace"
	)
fi

# present reports whether the check of one entry passes.
present() {
	case "$1" in
	/*) [[ -e "$1" ]] ;;
	*) command -v "$1" >/dev/null 2>&1 ;;
	esac
}

# missing_packages prints, once each, the packages of the failing entries.
missing_packages() {
	local entry check pkg
	for entry in "$@"; do
		read -r check pkg <<<"$entry"
		present "$check" || echo "$pkg"
	done | sort -u
}

# make vmtest downloads (never installs) arm64 kernels and busybox.
add_arm64=false
if $vm && ! dpkg --print-foreign-architectures | grep -qx arm64; then
	add_arm64=true
fi

mapfile -t need < <(missing_packages "${required[@]}")
want=()
if ((${#optional[@]})); then
	mapfile -t want < <(missing_packages "${optional[@]}")
fi

if ((${#need[@]} + ${#want[@]} == 0)) && ! $add_arm64; then
	echo "install-deps: all tools present"
	exit 0
fi

if ((EUID != 0)); then
	echo "install-deps: missing packages: ${need[*]} ${want[*]}; run this script as root or install them yourself" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if $add_arm64; then
	echo "install-deps: adding the arm64 architecture to apt (for make vmtest's arm64 kernel)"
	dpkg --add-architecture arm64
fi
echo "install-deps: installing ${need[*]} ${want[*]}"
apt-get update -qq
if ((${#need[@]})); then
	apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
for pkg in "${want[@]}"; do
	# Benchmarks that need a missing optional tool skip themselves.
	apt-get install -y -qq --no-install-recommends "$pkg" ||
		echo "install-deps: warning: could not install $pkg; benchmarks that need it will skip" >&2
done

# Verify: a package name that no longer provides the command must not pass silently.
mapfile -t still < <(missing_packages "${required[@]}")
if ((${#still[@]})); then
	echo "install-deps: still missing after install: ${still[*]}" >&2
	exit 1
fi
