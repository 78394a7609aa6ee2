# verbsexp: Go bindings for MLNX_OFED experimental verbs.
#
#   make generate                     regenerate generated/ from headers/
#   make generate OFED_INCLUDE=/usr/include
#                                     regenerate from an installed MLNX_OFED
#   make test                         everything CI runs
#   make bench-gen                    generation time vs go tool cgo -godefs

GO           ?= go
OFED_INCLUDE ?=
HEADERS      := $(if $(OFED_INCLUDE),$(OFED_INCLUDE),headers)
ARCHES       := amd64 arm64 ppc64le
# Packages under testdata are not matched by ./...; these carry cgo checks.
GOLDEN_CGO   := ./gen/testdata/golden/bitfields ./gen/testdata/golden/packed

.PHONY: generate test vet fmt-check bench-gen toolchains

toolchains:
	@scripts/ensure-toolchains

generate: toolchains
	$(GO) run ./gen -I $(HEADERS) -o generated

vet:
	$(GO) vet ./... $(GOLDEN_CGO)
	@for a in $(ARCHES); do \
		echo "CGO_ENABLED=0 GOARCH=$$a go vet ./generated ./abiutil"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) vet ./generated ./abiutil || exit 1; \
	done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '/testdata/c/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: toolchains fmt-check vet
	$(GO) test ./... $(GOLDEN_CGO)

bench-gen: toolchains
	$(GO) test ./gen -run '^$$' -bench BenchmarkGenerateVsGodefs -benchtime 10x $(if $(OFED_INCLUDE),-ofed $(OFED_INCLUDE))
