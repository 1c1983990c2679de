# triage — the two commands of the README, and the pieces they are made of.
#   make run    set up, build, start the gateway on its default configuration
#   make test   set up and run every test
GO      ?= go
BIN     := bin/triage
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# ort: tier 2 through ONNX Runtime (cgo; the library is loaded at run time,
# fetched by setup). TAGS=nomsgpack builds a pure-Go gateway with tier 1 only.
TAGS    ?= nomsgpack ort

.PHONY: all setup build run test vet fuzz bench bench-gateway clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/triage

run: build
	@bash scripts/run.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags ort ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: setup vet
	@bash scripts/install-chromium.sh   # the HTML report's render test runs in headless Chromium
	CGO_ENABLED=0 $(GO) build ./...
	TRIAGE_REQUIRE_ORT=1 TRIAGE_REQUIRE_USE=1 $(GO) test -race -count=1 -timeout 20m -tags ort ./...
	# and without the runtime: tier 2 says why it cannot run, tier 1 works
	$(GO) test -count=1 -timeout 5m -run 'WithoutTag|Stub|ABCLI|ShippedConfigs|SemanticRoutingEndToEnd' ./classifier/onnx ./cmd/triage

# A short run of every fuzz target (the corpus seeds also run in `make test`).
fuzz:
	$(GO) test ./router/openai -run '^$$' -fuzz FuzzExtract -fuzztime 60s
	$(GO) test ./router/h1 -run '^$$' -fuzz FuzzParseHead -fuzztime 60s

# In-process benchmarks of the request path, with allocations.
bench:
	$(GO) test ./router/... -run '^$$' -bench . -benchmem -count 6

# Side by side with nginx, fasthttp and gin+ReverseProxy (../shared/bench).
bench-gateway: build
	GW_CMD="$(CURDIR)/$(BIN) serve --config $(CURDIR)/bench/gateway.yaml" GW_PORT=18010 GW_NAME=triage \
	  GW_VERSION=$(VERSION) TARGETS=$${TARGETS:-direct,nginx,fasthttp,gin} bash ../shared/bench/run.sh

clean:
	rm -rf bin
