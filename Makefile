# triage — the two commands of the README, and the pieces they are made of.
#   make run    set up, build, start the gateway on its default configuration
#               (CONFIG=FILE for another; PORT=8081 to serve on 127.0.0.1:8081)
#   make test   set up and run every test
GO      ?= go
BIN     := bin/triage
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# ort: tier 2 through ONNX Runtime (cgo; the library is loaded at run time,
# fetched by setup). TAGS=nomsgpack builds a pure-Go gateway with tier 1 only.
TAGS    ?= nomsgpack ort

.PHONY: all setup build run test vet fuzz bench bench-gateway soak faults clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/triage

run: build
	@PORT="$(PORT)" CONFIG="$(or $(CONFIG),triage.yaml)" bash scripts/run.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags ort ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

test:
	@# The test dependencies (Chromium, redis-server, nginx, helm, the image's
	@# Debian packages: scripts/install-test-deps.sh) are downloads; they are
	@# fetched while setup builds the models and vet checks the code.
	@mkdir -p var; bash scripts/install-test-deps.sh >var/test-deps.log 2>&1 & deps=$$!; \
	$(MAKE) --no-print-directory setup vet; rc=$$?; \
	drc=0; wait $$deps || drc=$$?; sed 's/^/test-deps: /' var/test-deps.log; \
	if [ $$drc -ne 0 ]; then echo "scripts/install-test-deps.sh failed (exit $$drc): its output is above"; fi; \
	[ $$rc -eq 0 ] && [ $$drc -eq 0 ]
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) build -tags ort ./...   # without cgo the ort tag builds the stub
	# TRIAGE_REQUIRE_*: a missing model file, dataset or runtime fails the tests that need it instead of skipping them
	TRIAGE_REQUIRE_ORT=1 TRIAGE_REQUIRE_USE=1 TRIAGE_REQUIRE_MODELS=1 TRIAGE_REQUIRE_REDIS=1 $(GO) test -race -count=1 -timeout 20m -tags ort ./...
	# and without the runtime: tier 2 says why it cannot run, tier 1 works
	TRIAGE_REQUIRE_MODELS=1 $(GO) test -count=1 -timeout 5m -run 'WithoutTag|Stub|ABCLI|ShippedConfigs|SemanticRoutingEndToEnd' ./classifier/onnx ./cmd/triage
	# every triage command the README and docs/ show, with the output they show, and the
	# CLI tests that run a command over a whole dataset (without -race: they
	# classify thousands of prompts; under it they skip)
	TRIAGE_REQUIRE_ORT=1 TRIAGE_REQUIRE_USE=1 TRIAGE_REQUIRE_MODELS=1 $(GO) test -count=1 -timeout 10m -tags ort -run 'README|CLI' ./cmd/triage
	# and the allocation checks, without the race detector (under it sync.Pool drops items at random):
	# every TestXxxAllocs (allocs_test.go keeps them so named), in the packages that call AllocsPerRun
	TRIAGE_REQUIRE_MODELS=1 $(GO) test -count=1 -tags ort -run 'Allocs' $$(grep -rl --include='*_test.go' --exclude-dir=var 'testing\.AllocsPerRun(' . | xargs -n1 dirname | sort -u)
	# and the import of the real GloVe tarball, without the race detector (5 s here, 50 s under it, where it skips)
	TRIAGE_REQUIRE_MODELS=1 $(GO) test -count=1 -run 'GloVeReal' ./models/glove

# Every fuzz target in the repo, found by `go test -list` so new ones join
# by themselves, for FUZZTIME each (default 60s); stops at the first failure,
# whose input go test saves under the package's testdata/fuzz. FUZZFLAGS adds
# flags, such as -parallel 1. The corpus seeds also run in `make test`.
fuzz:
	@list=$$($(GO) test -list '^Fuzz' ./...) || { echo "$$list"; exit 1; }; \
	echo "$$list" | awk '/^Fuzz/ { f[n++] = $$1; next } /^ok/ { for (i = 0; i < n; i++) print $$2, f[i]; n = 0 }' | \
	while read -r pkg target; do \
		echo "== $$target ($$pkg)"; \
		$(GO) test "$$pkg" -run '^$$' -fuzz "^$$target\$$" -fuzztime $(or $(FUZZTIME),60s) $(FUZZFLAGS) || exit 1; \
	done

# In-process benchmarks of the request path, with allocations.
bench:
	$(GO) test ./router/... -run '^$$' -bench . -benchmem -count 6

# Side by side with nginx, fasthttp and gin+ReverseProxy (../shared/bench).
bench-gateway: build
	GW_CMD="$(CURDIR)/$(BIN) serve --config $(CURDIR)/bench/gateway.yaml" GW_PORT=18010 GW_NAME=triage \
	  GW_VERSION=$(VERSION) TARGETS=$${TARGETS:-direct,nginx,fasthttp,gin} bash ../shared/bench/run.sh

# The gateway and simulated replicas as processes under mixed traffic,
# faults, replica kills and config reloads (not part of `make test`):
# SOAK_DURATION of traffic (default 3m); SOAK_OUT=X.md (relative to this
# directory) also writes the summary as markdown and the heap profiles
# beside it (X-heap-warmup.pb.gz, X-heap-mid.pb.gz, X-heap-end.pb.gz);
# SOAK_CLIENTS (default 16) and SOAK_THINK (default 40ms) scale the traffic
# down for a long run; SOAK_TIMEOUT bounds the whole test (30m).
soak: setup
	SOAK_DURATION=$${SOAK_DURATION:-3m} $(GO) test -tags 'soak nomsgpack ort' -run TestSoak -timeout $${SOAK_TIMEOUT:-30m} -count=1 -v ./cmd/triage

# Whole-deployment faults (not part of `make test`; about 3 minutes): three
# gateways behind nginx sharing a redis-server, tier 2, access control,
# sessions and Responses chains on, under mixed traffic, while a gateway is
# SIGKILLed mid-stream, Redis restarted empty, Redis stalled (SIGSTOP),
# a replica SIGKILLed and the rules reloaded with a split. It fails on a
# request lost that was not in flight on a killed process, an error not
# in the client's dialect, a limit past its stated bound, or a session or
# chain made before a fault and not kept after it. FAULTS_OUT=X.md
# (relative to this directory) writes the per-fault report.
faults: setup
	$(GO) test -tags 'soak nomsgpack ort' -run TestDeploymentFaults -timeout $${FAULTS_TIMEOUT:-15m} -count=1 -v ./cmd/triage

clean:
	rm -rf bin
