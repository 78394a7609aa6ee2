# verbsexp: Go bindings for MLNX_OFED experimental verbs.
#
#   make generate                     regenerate generated/verbs from headers/
#   make generate OFED_INCLUDE=/usr/include [ENTRY=infiniband/verbs.h]
#                                     regenerate from an installed MLNX_OFED
#                                     (or, with ENTRY, upstream rdma-core)
#   make test [OFED_INCLUDE=DIR]      everything CI runs (includes abi-check),
#                                     against the headers generated/verbs comes from
#   make test-asan [OFED_DEBS=DIR]    softdev's C under AddressSanitizer: its package and the semantics
#                                     table (go test -asan), the driver too (built -fsanitize=address)
#   make abi-check [OFED_INCLUDE=DIR] gen check: current, C layouts, baseline diff
#   make abi-baseline                 accept generated/verbs/abi.json as the new baseline
#   make staticcheck                  staticcheck (honnef.co/go/tools, pinned in internal/tools/go.mod)
#   make bench-gen [OFED_INCLUDE=DIR] generation (cached, headers changed, fresh) vs go tool cgo -godefs,
#                                     and the CPU time of each stage (checks, front end, probes, emit)
#                                     and the C compilers' part of it
#   make fuzz [FUZZTIME=30s]          each fuzz target for FUZZTIME
#   make bench-scale                  generation time and peak RSS vs header size
#   make bench                        call shims, task posting (Go vs C vs floor), lease scaling,
#                                     collectives (coll's schedules vs the same plans from Go),
#                                     in one process and across 2, 4, 8 processes (time per
#                                     collective, host-free fraction)
#   make bench-mpirun                 the collectives across processes under mpirun -np 2, 4, 8
#                                     and srun --mpi=pmix -n 2, 4, 8 on a one-node Slurm cluster
#                                     of its own, one table (PMIx exchange; installs libpmix,
#                                     mpirun and Slurm as make test does)
#   make softdev [OFED_DEBS=DIR]      softdev exec and its driver for MLNX_OFED 4.9's libibverbs
#                                     (.tmp/softdev/; the packages default to ../shared/ofed-4.9;
#                                     OFED_INCLUDE=/usr/include: an installed MLNX_OFED's)
#   make bench-softdev [SPEED_ROUNDS=5]
#                                     perftest on softdev (two processes, the vendor's libibverbs)
#                                     against TCP between the same two addresses, rounds
#                                     interleaved, with the machine; and a post+poll round on the
#                                     driver's device against an in-process one (as root)
#   make examples                     run the examples on the software device in process (ccpingpong as
#                                     two processes, and in two network namespaces as root), and,
#                                     with MLNX_OFED's packages, through softdev exec

GO           ?= go
OFED_INCLUDE ?=
ENTRY        ?=
HEADERS      := $(if $(OFED_INCLUDE),$(OFED_INCLUDE),headers)
# OFED_INCLUDE may hold spaces: recipes quote it, and its absolute path
# comes from the shell (make's abspath splits it). Quotes and $ cannot be
# passed through make and the scripts.
ifneq ($(findstring ',$(OFED_INCLUDE))$(findstring ",$(OFED_INCLUDE))$(findstring $$,$(OFED_INCLUDE)),)
$(error OFED_INCLUDE=$(OFED_INCLUDE) holds a quote or a $$, which make cannot pass on; use a symbolic link to the directory, e.g. ln -s '...' /tmp/ofed-include)
endif
ABS_HEADERS   = $$(cd "$(HEADERS)" && pwd)
ARCHES       := amd64 arm64 ppc64le
# Packages under testdata are not matched by ./...; these carry cgo checks.
GOLDEN_CGO   := ./gen/testdata/golden/arrays ./gen/testdata/golden/bitfields ./gen/testdata/golden/packed ./gen/testdata/golden/funcs ./gen/testdata/golden/names

# The ABI users built against, and reviewed breaking changes since (see
# docs/regenerate.md).
BASELINE     ?= tests/testdata/baseline/abi.json
ABI_ACK      ?= tests/testdata/baseline/ack.txt

# The runtime, its software device, the shims' tests and the examples run
# under the race detector and with cgocheck2 (Go pointers in C memory).
RUNTIME_PKGS := ./runtime/... ./internal/shimtest ./examples/...
# The launcher's tests run the vendor's C programs: the race detector and
# cgocheck2 have nothing of theirs to watch.
RACE_PKGS     = $$($(GO) list $(RUNTIME_PKGS) | grep -v /runtime/softdev/launch)
COUNT        ?= 5
# Interleaved runs of each make bench-gen scenario (medians are printed).
BENCH_GEN_RUNS ?= 7

# MLNX_OFED 4.9's own user space (its .deb packages, unpacked into a
# cache, never installed): softdev's driver is built against it and its
# programs judge the device (runtime/softdev/launch's tests).
OFED_DEBS    ?= $(abspath $(CURDIR)/../shared/ofed-4.9/debs)
export OFED_DEBS

.PHONY: examples-exec generate test vet softdev bench-softdev staticcheck fmt-check bench-gen toolchains launchers abi-check abi-baseline test-runtime test-asan bench bench-mpirun examples origin-test origin-abi-check

toolchains:
	@scripts/ensure-toolchains

# libpmix (runtime/coll/pmix binds it) and mpirun (its tests run ranks
# under it): only that package needs them.
launchers:
	@scripts/ensure-launchers

# Generates into a scratch directory, prints the ABI diff against the
# current generated/verbs/abi.json and replaces generated/verbs only if nothing breaks
# (ALLOW_BREAKING=1 to accept breaking changes).
generate: toolchains
	@GO=$(GO) ALLOW_BREAKING=$(ALLOW_BREAKING) OFED_INCLUDE="$(OFED_INCLUDE)" ENTRY=$(ENTRY) scripts/regenerate "$(HEADERS)"

# make test and make abi-check check generated/verbs against HEADERS: when it
# was generated from other headers, say so in one line and stop.
ORIGIN = @mkdir -p .tmp && $(GO) build -o .tmp/origin ./scripts/origin && .tmp/origin
origin-test:
	$(ORIGIN) test "$(HEADERS)" $(ENTRY)
origin-abi-check:
	$(ORIGIN) abi-check "$(HEADERS)" $(ENTRY)

# gen check: stale check, manifest = C compiler on every arch, and the
# diff against BASELINE (ACK_BREAKING=1 or ABI_ACK entries accept breaks).
abi-check: toolchains origin-abi-check
	@GO=$(GO) HEADERS="$(HEADERS)" ENTRY=$(ENTRY) BASELINE=$(BASELINE) ABI_ACK=$(ABI_ACK) ACK_BREAKING=$(ACK_BREAKING) scripts/abi-check

abi-baseline:
	cp generated/verbs/abi.json $(BASELINE)
	@printf '# Breaking changes against the baseline, one "KIND SUBJECT" per line (see docs/regenerate.md).\n' > $(ABI_ACK)
	@echo "baseline is now generated/verbs/abi.json; commit $(BASELINE) and $(ABI_ACK)"

vet: launchers
	$(GO) vet ./... $(GOLDEN_CGO)
	$(GO) vet -tags pmix ./runtime/coll
	@for a in $(ARCHES); do \
		echo "CGO_ENABLED=0 GOARCH=$$a go vet ./generated/verbs ./abiutil"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) vet ./generated/verbs ./abiutil || exit 1; \
	done

# staticcheck is built from internal/tools, a module of its own: a tool
# directive in go.mod would make it a requirement of every module that
# requires this one. The first build fetches it through the module proxy.
STATICCHECK := .tmp/staticcheck
staticcheck:
	@mkdir -p .tmp && $(GO) build -C internal/tools -o $(CURDIR)/$(STATICCHECK) honnef.co/go/tools/cmd/staticcheck
	$(STATICCHECK) ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '/testdata/c/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# With OFED_INCLUDE, the C the tests compile (softdev, the shims' test
# provider) reads those headers too: CGO_CFLAGS precede a package's own -I.
CGO_ENV      := $(if $(OFED_INCLUDE),CGO_CFLAGS="-O2 -g \"-I$(ABS_HEADERS)\"")

# VERBSEXP_HEADERS tells tests/ which headers generated/verbs comes from. tests/
# walks whole user loops in scratch modules (TestUserModule,
# TestPrintedNextSteps): more than go test's default 10 minutes on 2 cores.
#
# Without MLNX_OFED 4.9's packages (OFED_DEBS) the tests that need them
# skip, each appending a line to OFED_SKIPLOG, and make test says at the
# end, loudly, which did not run and how to get the packages; with them
# (and always in CI: REQUIRE_OFED=1), such a skip is a failure.
OFED_SKIPLOG := $(CURDIR)/.tmp/ofed-skipped.txt
OFEDSTATUS    = @mkdir -p .tmp && $(GO) build -o .tmp/ofedstatus ./scripts/ofedstatus && .tmp/ofedstatus
REQUIRE_OFED ?= $(shell ls "$(OFED_DEBS)"/*.deb >/dev/null 2>&1 && echo 1)
OFED_ENV      = VERBSEXP_OFED_SKIPLOG="$(OFED_SKIPLOG)" $(if $(REQUIRE_OFED),VERBSEXP_REQUIRE_OFED=1)
test: toolchains launchers origin-test fmt-check vet staticcheck
	$(OFEDSTATUS) check "$(OFED_DEBS)"
	@rm -f "$(OFED_SKIPLOG)"
	@echo "== make test: go test ./... (against $(HEADERS))"
	VERBSEXP_HEADERS="$(ABS_HEADERS)" VERBSEXP_ACK_BREAKING=$(ACK_BREAKING) $(OFED_ENV) $(CGO_ENV) $(GO) test -timeout 40m ./... $(GOLDEN_CGO)
	@echo "== make test: runtime under -race and cgocheck2"
	@$(MAKE) --no-print-directory test-runtime
	@echo "== make test: abi-check"
	@$(MAKE) --no-print-directory abi-check
	$(OFEDSTATUS) summary "$(OFED_SKIPLOG)"

bench-gen: toolchains
	$(GO) test ./gen -run '^$$' -bench BenchmarkGenerateVsGodefs -benchtime $(BENCH_GEN_RUNS)x $(if $(OFED_INCLUDE),-ofed "$(OFED_INCLUDE)")

# The srun tests (TestSrun*: a Slurm cluster each, internal/slurmtest)
# run once, in make test's go test ./...: what they add is the
# launcher, and the ranks' code under the race detector and cgocheck2 is
# the mpirun and multi-process tests' (this saves about 35 s).
test-runtime:
	$(OFED_ENV) $(CGO_ENV) $(GO) test -race -skip '^TestSrun' $(RACE_PKGS)
	$(OFED_ENV) $(CGO_ENV) GOEXPERIMENT=cgocheck2 $(GO) test -skip '^TestSrun' $(RACE_PKGS)

# AddressSanitizer over softdev's C, so that a use after free or an
# overflow in the engine is found (issue 35): go test -asan builds the
# engine and cgo's C with -fsanitize=address. The semantics table's
# library path and the launch tests build the driver with CC=.tmp/asan/cc
# (gcc -fsanitize=address) and run the vendor's programs on it under
# softdev exec, which needs libasan loaded before it: the run preloads it
# (verify_asan_link_order=0, as softdev exec puts the driver first).
# Leak checks are off (the engine keeps closed devices' records, dynlib its
# C strings, for the process's life); allocator_may_return_null lets the
# tests of huge sizes see the allocator's NULL. The test binaries stay in
# .tmp/asan (go test -o keeps their DWARF) so that reports name lines.
# Skipped there: the package cache's tests (env -i drops the preload),
# ibv_cc_pingpong's (they fail on any output saying "failed", and the
# vendor's libibverbs prints "vsetenv LD_PRELOAD failed" whenever
# LD_PRELOAD was set before softdev exec), the README's block and the
# speed smoke test (neither adds a path of the driver).
ASAN_OPTS    := allocator_may_return_null=1:detect_leaks=0
ASAN_SKIP    := ^(TestPlantedCache|TestCacheChecked|TestKilledUnpack|TestCCPingpong|TestCCPingpongInterop|TestReadmeExample|TestSpeedSmoke)$$
test-asan:
	@mkdir -p .tmp/asan && printf '#!/bin/sh\nexec gcc -fsanitize=address -fno-omit-frame-pointer "$$@"\n' >.tmp/asan/cc && chmod +x .tmp/asan/cc
	ASAN_OPTIONS=$(ASAN_OPTS) $(CGO_ENV) $(GO) test -asan -o .tmp/asan/ -timeout 30m ./runtime/softdev
	ASAN_OPTIONS=$(ASAN_OPTS):verify_asan_link_order=0 LD_PRELOAD=$$(gcc -print-file-name=libasan.so) CC=$(CURDIR)/.tmp/asan/cc \
		VERBSEXP_REQUIRE_OFED=1 $(CGO_ENV) $(GO) test -asan -o .tmp/asan/ -timeout 60m -skip '$(ASAN_SKIP)' ./runtime/softdev/semantics ./runtime/softdev/launch

# Benchmarks with allocations, COUNT runs each: quote medians. The
# collectives across processes run once (8 processes; their rounds are
# interleaved inside: a few minutes on 2 cores), and print their table.
PROC_BENCH   := BenchmarkCollectiveProcesses
bench:
	$(GO) test -run '^$$' -bench . -skip '^$(PROC_BENCH)$$' -benchmem -count $(COUNT) ./internal/shimtest ./runtime/task ./runtime/lease ./runtime/coll
	$(GO) test -run '^$$' -bench '^$(PROC_BENCH)$$' -benchtime 1x -timeout 30m ./runtime/coll

# The same under mpirun and srun, New's exchange through PMIx (-tags
# pmix links libpmix into coll's tests): short checked runs, then the
# benchmark.
bench-mpirun: launchers
	$(GO) test -tags pmix -run '^TestCollective(Mpirun|Srun)Bench$$' -bench '^BenchmarkCollectiveLaunchers$$' -benchtime 1x -timeout 60m -v ./runtime/coll

# mpirun refuses root without --allow-run-as-root; --oversubscribe lets
# 8 ranks share fewer cores.
MPIRUN_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-run-as-root) --oversubscribe

examples: launchers
	$(OFEDSTATUS) check "$(OFED_DEBS)"
	VERBSEXP_DEVICE=softdev $(GO) run ./examples/tasklist
	$(GO) run ./examples/pingpong -rounds 1000 -size 64
	$(GO) run ./examples/pingpong -rounds 20000 -max-wr 40000
	@for op in sum max and or xor; do $(GO) run ./examples/allreduce -ranks 16 -op $$op -type uint || exit 1; done
	$(GO) run ./examples/allreduce -ranks 16 -op sum -type float
	$(GO) run ./examples/allreduce -ranks 12 -op max -type int
	$(GO) run ./examples/collectives -ranks 12 -root 5
	@# collectives, one rank per process on its own softdev device: under
	@# mpirun (PMIx) and through the TCP rendezvous from a shell loop.
	$(GO) build -o .tmp/collectives ./examples/collectives
	@for n in 2 4 8; do \
		echo "mpirun -np $$n .tmp/collectives -launch env"; \
		mpirun $(MPIRUN_FLAGS) -np $$n .tmp/collectives -launch env -iters 50 || exit 1; \
	done
	scripts/rendezvous-job 4 .tmp/collectives -launch env -iters 50
	@# ccpingpong: the built program as a server and a client process, on
	@# loopback and (as root) in two network namespaces joined by a veth.
	$(GO) build -o .tmp/ccpingpong ./examples/ccpingpong
	$(GO) test -count=1 -v -run '^(TestTwoProcesses|TestNamespaces)$$' ./examples/ccpingpong -args -ccpingpong.bin=$(CURDIR)/.tmp/ccpingpong
	@# the same collectives, each rank's device opened through MLNX_OFED 4.9's
	@# own libibverbs with softdev as its driver (softdev exec), as on a
	@# cluster: only with the vendor's packages.
	@if [ -n "$(REQUIRE_OFED)" ]; then $(MAKE) --no-print-directory examples-exec; else \
		echo "== SKIPPED: mpirun -np 2, 4, 8 softdev exec -- .tmp/collectives -device verbs: no MLNX_OFED 4.9 packages at $(OFED_DEBS) (see above)"; fi

examples-exec: softdev
	$(GO) build -o .tmp/tasklist ./examples/tasklist
	.tmp/softdev/softdev exec -- .tmp/tasklist
	@for n in 2 4 8; do \
		echo "mpirun -np $$n softdev exec -- .tmp/collectives -launch env -device verbs"; \
		mpirun $(MPIRUN_FLAGS) -np $$n .tmp/softdev/softdev exec -- .tmp/collectives -launch env -device verbs -iters 50 || exit 1; \
	done

# Fuzzing (go test -fuzz): one target per go test invocation, each for
# FUZZTIME. Crashers land in the package's testdata/fuzz/<Fuzz…>/ and
# then run as regression tests with every go test.
FUZZTIME     ?= 30s
FUZZ_TARGETS := ./gen:FuzzGenerate ./internal/manifest:FuzzUnmarshal ./internal/abicheck:FuzzCheckSource ./gen/internal/diff:FuzzCompare ./runtime/task:FuzzTaskList ./runtime/coll:FuzzEndpoint ./runtime/coll/rendezvous:FuzzFrame ./runtime/softdev:FuzzWireFrames

.PHONY: fuzz bench-scale
# Go before 1.27 can fail a target with a bare "context deadline exceeded"
# when -fuzztime ends while a worker is busy (go.dev/issue/75804, no input
# written): such a run is said so and run once more; any other failure,
# or a failing input written, fails at once.
fuzz: toolchains
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		for try in 1 2; do \
			echo "== fuzz $$name ($$pkg) for $(FUZZTIME)"; \
			out=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 20x $$pkg 2>&1); rc=$$?; \
			echo "$$out"; \
			[ $$rc -eq 0 ] && break; \
			if [ $$try -eq 1 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
				echo "== fuzz $$name: FLAKE: Go's fuzz coordinator reported a bare deadline at the end of -fuzztime (go.dev/issue/75804, fixed in Go 1.27), no failing input written; running it once more"; \
				continue; \
			fi; \
			exit 1; \
		done; \
	done

# Generation time and peak RSS on 1×, 4×, 16× synthetic copies of headers/,
# with the fitted exponent of time vs size.
bench-scale: toolchains
	$(GO) test ./gen -run '^$$' -bench BenchmarkGenerateScale -benchtime 1x

# softdev exec and its driver, side by side (the launcher looks for the
# driver beside itself).
softdev:
	$(GO) build -o .tmp/softdev/softdev ./runtime/softdev/cmd/softdev
	.tmp/softdev/softdev build-driver $(if $(OFED_INCLUDE),-include "$(OFED_INCLUDE)",-ofed-debs "$(OFED_DEBS)") -src runtime/softdev -o .tmp/softdev/libsoftdev-rdmav2.so
	@echo "built .tmp/softdev/softdev and .tmp/softdev/libsoftdev-rdmav2.so"

# A measurement, not a test (make test runs TestSpeedSmoke instead: one
# round, tiny counts, nothing judged). The launch tests build the driver
# and the softdev command themselves; rounds are minutes each on 2 cores.
SPEED_ROUNDS ?= 5
bench-softdev:
	$(GO) test ./runtime/softdev/launch -run '^$$' -bench '^Benchmark(PerftestVsTCP|ProviderPath)$$' -benchtime 1x -timeout 90m -args -speed.rounds=$(SPEED_ROUNDS)
