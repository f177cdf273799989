# Airlock — see README.md. `make` alone lists the targets.
SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
GO           ?= go
# The Podman bindings build without gpgme/btrfs/devicemapper headers with these tags.
TAGS         := remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp
GOTAGS       := -tags '$(TAGS)'
VERSION      ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN          := bin/airlock
FUZZTIME     ?= 10s
TESTTIMEOUT  ?= 40m
# Everything the host needs, from Debian's archive (make setup).
DEB_PACKAGES := podman runc uidmap conmon catatonit fuse-overlayfs iproute2 nftables \
                clang-14 llvm-14 libbpf-dev make git curl ca-certificates python3 \
                debootstrap chromium iperf3 squid-openssl unbound dnsperf wrk \
                python3-pytest python3-venv
SANDBOX_USER := airlock-sandbox

.DEFAULT_GOAL := help
.PHONY: help build test test-go lint vet fmt fmt-check staticcheck fuzz generate generate-check \
        bench setup image run clean sdk-deps

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/airlock and bin/airlock-init (the static in-sandbox agent, found beside bin/airlock)
	$(GO) build $(GOTAGS) -trimpath -ldflags '-X main.version=$(VERSION)' -o $(BIN) ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/airlock-init ./cmd/airlock-init

test: lint generate-check test-go fuzz ## the whole test suite (CI runs this): lint, generated code, tests, brief fuzzing

test-go: sdk-deps ## go test ./... (tests that need root run when root)
	$(GO) test $(GOTAGS) -count=1 -timeout $(TESTTIMEOUT) ./...

# The MCP client test's npm packages (e2e/sdk_test.go), from the committed lock file.
sdk-deps: sdk/mcp-test/node_modules/.installed ## install the MCP test client (npm ci in sdk/mcp-test)
sdk/mcp-test/node_modules/.installed: sdk/mcp-test/package.json sdk/mcp-test/package-lock.json
	cd sdk/mcp-test && npm ci --no-audit --no-fund && touch node_modules/.installed

lint: vet fmt-check staticcheck ## go vet, gofmt check, staticcheck

vet:
	$(GO) vet $(GOTAGS) ./...

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go' | xargs grep -L '^// Code generated')

fmt-check:
	@bad=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | xargs grep -L '^// Code generated')); \
	if [ -n "$$bad" ]; then echo "not gofmt-formatted:"; echo "$$bad"; exit 1; fi

staticcheck:
	$(GO) tool staticcheck $(GOTAGS) ./...

fuzz: ## run every fuzz target for FUZZTIME (default 10s) each; fails if any target fails
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh $(GOTAGS)

generate: ## regenerate the eBPF objects and bindings (needs clang-14)
	$(GO) generate ./bpf/...

generate-check: ## check that the C compiles and the committed generated files are current
	@if [ -x bpf/generate-check.sh ]; then bpf/generate-check.sh; else echo "no bpf sources yet"; fi

bench: build ## benchmarks and side-by-side comparisons (see bench/)
	$(GO) test $(GOTAGS) -run '^$$' -bench . -benchmem ./...
	@for s in bench/*.sh; do [ -x "$$s" ] && "$$s"; done

setup: ## install every host prerequisite from Debian's packages and create the sandbox user (idempotent)
	@if [ "$$(id -u)" != 0 ]; then echo "make setup must run as root"; exit 1; fi
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "host packages: all present"; fi
	@getent group airlock >/dev/null || groupadd --system airlock
	@id -u $(SANDBOX_USER) >/dev/null 2>&1 || useradd --system --create-home --shell /usr/sbin/nologin $(SANDBOX_USER)
	@grep -q '^$(SANDBOX_USER):' /etc/subuid || usermod --add-subuids 200000-265535 $(SANDBOX_USER)
	@grep -q '^$(SANDBOX_USER):' /etc/subgid || usermod --add-subgids 200000-265535 $(SANDBOX_USER)
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
	@echo "setup: done"

image: ## build the sandbox images locally and import them for the sandbox user (cached)
	@if [ -x runner/images/build.sh ]; then runner/images/build.sh; else echo "no image recipes yet"; fi

run: build image ## the main job: a sandbox under an example policy, then its log
	@if [ -x scripts/quickstart.sh ]; then scripts/quickstart.sh; else \
	  $(BIN) policy check policies/examples/*.toml && $(BIN) policy test policies/examples/*.toml; fi

clean: ## remove build output
	rm -rf bin
	$(GO) clean -testcache
