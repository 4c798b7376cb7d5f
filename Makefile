# bpfcol: `make run` to try it, `make test` before sending a change.
# `make help` lists every target.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build
# Targets share one working tree: generate rewrites files that build reads.
.NOTPARALLEL:

GO ?= go
# Config used by `make run`.
CONFIG ?= config/local.yaml
# Per test binary; the BPF and end-to-end tests are the slow ones.
TEST_TIMEOUT ?= 30m
# `make bench BENCH=Overhead BENCHTIME=10x` narrows and shortens a run.
BENCH ?= .
BENCHTIME ?= 2s
# test/e2e's benchmarks run one after the other: the soak (10 min) and the
# five side-by-side scenarios (about 11 min) alone come close to 30m.
BENCH_TIMEOUT ?= 60m

BIN := bin/bpfcol
# ocb and mdatagen are pinned in their own module so that their dependencies
# never leak into ours; they are built into the git-ignored .cache/tools.
TOOLS_BIN := $(CURDIR)/.cache/tools
BUILDER := $(TOOLS_BIN)/builder
MDATAGEN := $(TOOLS_BIN)/mdatagen
TOOLS_MOD := internal/tools/go.mod internal/tools/go.sum

# Everything compiled into bin/bpfcol: Go sources and embedded BPF objects.
BUILD_INPUTS := builder-config.yaml go.mod go.sum \
	$(shell find . \( -path ./.git -o -path ./_build -o -path ./.cache -o -path ./bin -o -path ./internal/tools \) -prune \
		-o -type f \( -name '*.go' ! -name '*_test.go' -o -name '*.o' \) -print)

.PHONY: help build run generate mdatagen check-generate test fuzz-short bench vmtest deps deps-bench deps-vm clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

build: $(BIN) ## Build bin/bpfcol with ocb (skipped when no input changed).

# ocb makes a temporary directory for its default output path before it
# reads ours, and never removes it: TMPDIR keeps it in _build, emptied here.
$(BIN): $(BUILD_INPUTS) $(BUILDER)
	rm -rf _build/tmp && mkdir -p _build/tmp
	TMPDIR=$(CURDIR)/_build/tmp $(BUILDER) --config builder-config.yaml
	@mkdir -p $(@D)
	cp _build/bpfcol $@.tmp && mv -f $@.tmp $@

run: build ## Build, then run bin/bpfcol with config/local.yaml (or CONFIG=path).
	$(BIN) --config $(CONFIG)

generate: deps $(MDATAGEN) ## Regenerate code: bpf2go objects and bindings, mdatagen metadata.
	PATH="$(TOOLS_BIN):$$PATH" $(GO) generate ./...

mdatagen: $(MDATAGEN) ## Regenerate only the components' mdatagen output.
	PATH="$(TOOLS_BIN):$$PATH" $(GO) generate -run 'go:generate mdatagen ' ./...

check-generate: ## Fail if `make generate` changes any file.
	scripts/check-generate.sh $(MAKE) --no-print-directory generate

test: deps check-generate build ## Install missing tools, check generated code, vet, run all tests.
	$(GO) vet ./...
	# The BPF packages build for linux on amd64 and arm64; elsewhere their
	# stubs must still compile.
	GOOS=darwin $(GO) vet ./...
	GOOS=linux GOARCH=arm64 $(GO) vet ./...
	# -p 1: the uprobe timing tests and the end-to-end collectors must not
	# share the two CPUs with other test binaries.
	$(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) ./...
	# The kernel-facing tests again on the kernels most users run (Debian
	# 12's 6.1 and 6.12, emulated: about 2 min each). make vmtest adds
	# arm64, left out here: under its emulation with a thread per vCPU,
	# TestOffCPUThreadBound saw no switch at all in 2 of 17 boots, and
	# TestDlopenLateLibrary missed calls in 1 of 6; on one thread (now) 4
	# of 4 boots passed, too few yet to rely on.
	$(GO) run ./test/vmtest -targets $(TEST_VM_TARGETS)
	$(MAKE) --no-print-directory fuzz-short

# go test -fuzz takes one target per run. A short -fuzzminimizetime keeps
# the worker from spending the whole run minimizing a large (ELF-sized)
# new input, during which no exec is counted. Each target is
# NAME:PACKAGE:EXECS. The budget is a count, not a duration: with a
# duration, Go 1.26's fuzz coordinator can report its own deadline as a
# failure ("context deadline exceeded", go.dev/issue/75804, fixed in 1.27).
# Each count took 2-14 s on the CI machine.
FUZZ_TARGETS := FuzzOpenBinary:./internal/symbolize:15000 \
	FuzzDWARF:./internal/symbolize/dwarfsym:100000 \
	FuzzGopclntab:./internal/symbolize/gotable:150000 \
	FuzzCFI:./internal/unwind/cfi:100000 \
	FuzzStreamCheck:./internal/symbolize/debuginfod:150000 \
	FuzzPerfMap:./internal/perfmap:300000 \
	FuzzLineTable:./internal/interp/python:50000 \
	FuzzCodeObject:./internal/interp/python:50000 \
	FuzzPositions:./internal/interp/v8:50000 \
	FuzzFrame:./internal/interp/v8:5000 \
	FuzzVMStructs:./internal/interp/hotspot:30000 \
	FuzzNMethod:./internal/interp/hotspot:50000 \
	FuzzLineTable:./internal/interp/hotspot:100000 \
	FuzzMethodName:./internal/interp/hotspot:100000
fuzz-short: ## Fuzz each ELF, DWARF, gopclntab, CFI, code object, line table, vmStructs, nmethod and V8 frame reader (about 8 s each).
	for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; execs=$${rest#*:}; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${execs}x -fuzzminimizetime 1s $$pkg || exit 1; \
	done

# -p 1: benchmarks of different packages must not compete for the CPUs.
bench: deps-bench build ## Run every benchmark, one package at a time.
	$(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem -count 1 -timeout $(BENCH_TIMEOUT) ./...

# Which of test/vmtest's targets `make vmtest` boots (comma-separated), and
# which `make test` boots.
VMTEST_TARGETS ?= all
TEST_VM_TARGETS ?= x86_64-6.1,x86_64-6.12

vmtest: deps-vm ## Run the kernel-facing tests in VMs: Debian's 6.1 and 6.12 on x86-64, 6.1 on arm64.
	$(GO) run ./test/vmtest -targets $(VMTEST_TARGETS)

deps: ## Install missing build and test tools with apt-get.
	scripts/install-deps.sh

deps-bench: ## deps, plus perf and bpftrace for benchmarks.
	scripts/install-deps.sh --bench

deps-vm: ## deps, plus the arm64 emulator and cross compilers for vmtest.
	scripts/install-deps.sh --vm

clean: ## Remove build outputs and the pinned tools.
	rm -rf _build bin .cache/tools

# The tools run here: built for this machine even when GOARCH asks
# `make build` for another's collector.
$(BUILDER): $(TOOLS_MOD)
	cd internal/tools && GOOS= GOARCH= $(GO) build -o $@ go.opentelemetry.io/collector/cmd/builder
	@touch $@

$(MDATAGEN): $(TOOLS_MOD)
	cd internal/tools && GOOS= GOARCH= $(GO) build -o $@ go.opentelemetry.io/collector/cmd/mdatagen
	@touch $@
