# Airlock — see README.md. `make` alone lists the targets.
SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
GO           ?= go
# The Podman bindings build without gpgme/btrfs/devicemapper headers with these tags.
TAGS         := remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp
GOTAGS       := -tags '$(TAGS)'
VERSION      ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
OUT          ?= bin
BIN          := $(OUT)/airlock
# bin/airlock is cmd/airlock-front: it runs `sandbox exec` itself (no HTTP
# stack, no command tree) and execs bin/airlock-cli for everything else.
# bin/airlock-cli is cmd/airlock built with this tag: only the control API's
# client; its appliance commands (serve, logs, policy, ...) exec
# bin/airlockd, the same package built whole, beside it.
THINTAGS     := -tags airlock_thin
FUZZTIME     ?= 10s
TESTTIMEOUT  ?= 40m
# Everything the host needs, from Debian's archive (make setup).
DEB_PACKAGES := podman runc uidmap conmon catatonit fuse-overlayfs iproute2 nftables \
                clang-14 llvm-14 libbpf-dev make git curl ca-certificates python3 \
                debootstrap chromium iperf3 squid-openssl unbound dnsperf wrk systemd logrotate \
                python3-pytest python3-venv containernetworking-plugins
SANDBOX_USER := airlock-sandbox
# make install: the usual PREFIX and DESTDIR (docs/operations.md). The binaries
# go to LIBEXECDIR (airlock finds airlock-cli, airlock-cli finds airlockd, and
# the runner airlock-init, beside the real executable); BINDIR/airlock is a symbolic link to airlock.
PREFIX       ?= /usr/local
DESTDIR      ?=
BINDIR       ?= $(PREFIX)/bin
LIBEXECDIR   ?= $(PREFIX)/libexec/airlock
UNITDIR      ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR   ?= /etc
STATEDIR     ?= /var/lib/airlock
LOGDIR       ?= /var/log/airlock

.DEFAULT_GOAL := help
.PHONY: help build test test-go lint vet fmt fmt-check staticcheck policy-check schema fuzz generate generate-check \
        bench setup users image run install install-files uninstall clean sdk-deps

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/airlock (runs sandbox exec, execs the CLI bin/airlock-cli for the rest), bin/airlockd (the appliance), bin/airlock-init (the static in-sandbox agent) and bin/airlock-cni
	$(GO) build $(GOTAGS) -trimpath -ldflags '-X main.version=$(VERSION)' -o $(OUT)/airlockd ./cmd/airlock
	CGO_ENABLED=0 $(GO) build $(THINTAGS) -trimpath -ldflags '-X main.version=$(VERSION)' -o $(OUT)/airlock-cli ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN) ./cmd/airlock-front
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(OUT)/airlock-init ./cmd/airlock-init
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(OUT)/airlock-cni ./cmd/airlock-cni

test: lint generate-check test-go fuzz ## the whole test suite (CI runs this): lint, generated code, tests, brief fuzzing

test-go: sdk-deps ## go test ./... (tests that need root run when root)
	$(GO) test $(GOTAGS) -count=1 -timeout $(TESTTIMEOUT) ./...

lint: vet fmt-check staticcheck policy-check ## go vet, gofmt check, staticcheck, the example policies

policy-check: ## check (--strict: warnings fail) and test the example policies
	$(GO) run $(GOTAGS) ./cmd/airlock policy check --strict policies/examples/*.toml
	$(GO) run $(GOTAGS) ./cmd/airlock policy test policies/examples/*.toml

schema: ## regenerate docs/policy.schema.json from the policy loader's definitions
	$(GO) run $(GOTAGS) ./cmd/airlock policy schema > docs/policy.schema.json.tmp && mv docs/policy.schema.json.tmp docs/policy.schema.json

# The MCP client test's npm packages (e2e/sdk_test.go) and the npm-registry clients of
# proxy/pkgclients_test.go, from the committed lock files.
sdk-deps: sdk/mcp-test/node_modules/.installed sdk/clients/node_modules/.installed ## install the MCP test client and the pinned pnpm and yarn the package-gate tests run (npm ci in sdk/mcp-test, sdk/clients)
sdk/mcp-test/node_modules/.installed: sdk/mcp-test/package.json sdk/mcp-test/package-lock.json
	cd sdk/mcp-test && npm ci --no-audit --no-fund && touch node_modules/.installed
# pnpm and yarn (classic and berry) at the exact versions of sdk/clients/package-lock.json;
# their install scripts are not run (none is needed).
sdk/clients/node_modules/.installed: sdk/clients/package.json sdk/clients/package-lock.json
	cd sdk/clients && npm ci --no-audit --no-fund --ignore-scripts && touch node_modules/.installed

vet:
	$(GO) vet $(GOTAGS) ./...
	CGO_ENABLED=0 $(GO) vet $(THINTAGS) ./cmd/airlock

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go' | xargs grep -L '^// Code generated')

fmt-check:
	@bad=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | xargs grep -L '^// Code generated')); \
	if [ -n "$$bad" ]; then echo "not gofmt-formatted:"; echo "$$bad"; exit 1; fi

staticcheck:
	$(GO) tool staticcheck $(GOTAGS) ./...
	CGO_ENABLED=0 $(GO) tool staticcheck $(THINTAGS) ./cmd/airlock

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
	@$(MAKE) --no-print-directory users
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
	@echo "setup: done"

users: ## create the airlock group and the unprivileged sandbox user with its subordinate ids (idempotent; root)
	@if [ "$$(id -u)" != 0 ]; then echo "make users must run as root"; exit 1; fi
	@getent group airlock >/dev/null || groupadd --system airlock
	@id -u $(SANDBOX_USER) >/dev/null 2>&1 || useradd --system --create-home --shell /usr/sbin/nologin $(SANDBOX_USER)
	@grep -q '^$(SANDBOX_USER):' /etc/subuid || usermod --add-subuids 200000-265535 $(SANDBOX_USER)
	@grep -q '^$(SANDBOX_USER):' /etc/subgid || usermod --add-subgids 200000-265535 $(SANDBOX_USER)

image: ## build the sandbox images locally and import them for the sandbox user (cached)
	@if [ -x runner/images/build.sh ]; then runner/images/build.sh; else echo "no image recipes yet"; fi

run: build image ## the main job: an agent's task in a sandbox against a hermetic world (scripts/quickstart.sh), then its log
	@if [ -x scripts/quickstart.sh ]; then scripts/quickstart.sh; else \
	  $(BIN) policy check --strict policies/examples/*.toml && $(BIN) policy test policies/examples/*.toml; fi

install: build ## install for operators: binaries, /etc/airlock skeleton, state dirs, systemd unit, logrotate (docs/operations.md)
	@if [ -z "$(DESTDIR)" ]; then $(MAKE) --no-print-directory users; fi
	@$(MAKE) --no-print-directory install-files
	@if [ -z "$(DESTDIR)" ]; then \
	  command -v systemctl >/dev/null && [ -d /run/systemd/system ] && systemctl daemon-reload || true; fi
	@echo "installed; next: edit $(SYSCONFDIR)/airlock/airlock.toml, then systemctl enable --now airlock (docs/operations.md)"

install-files: ## install what OUT (default bin/) holds, without building or creating users (DESTDIR for packages)
	@test -x $(OUT)/airlock && test -x $(OUT)/airlock-cli && test -x $(OUT)/airlockd && test -x $(OUT)/airlock-init || { echo "no $(OUT)/airlock, $(OUT)/airlock-cli, $(OUT)/airlockd or $(OUT)/airlock-init: run make build"; exit 1; }
	install -d -m 0755 $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/logrotate.d
	install -m 0755 $(OUT)/airlock $(OUT)/airlock-cli $(OUT)/airlockd $(OUT)/airlock-init $(DESTDIR)$(LIBEXECDIR)/
	ln -sfr $(DESTDIR)$(LIBEXECDIR)/airlock $(DESTDIR)$(BINDIR)/airlock
	sed -e 's|@LIBEXECDIR@|$(LIBEXECDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@STATEDIR@|$(STATEDIR)|g' \
	    -e 's|@LOGDIR@|$(LOGDIR)|g' packaging/airlock.service.in > $(DESTDIR)$(UNITDIR)/airlock.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/airlock.service
	sed -e 's|@LOGDIR@|$(LOGDIR)|g' packaging/logrotate.in > $(DESTDIR)$(SYSCONFDIR)/logrotate.d/airlock
	chmod 0644 $(DESTDIR)$(SYSCONFDIR)/logrotate.d/airlock
	@# The operator's files are never overwritten: an upgrade keeps them.
	install -d -m 0750 $(DESTDIR)$(SYSCONFDIR)/airlock $(DESTDIR)$(SYSCONFDIR)/airlock/policies
	@for f in airlock.toml:packaging/airlock.toml policies/coding-agent.toml:policies/examples/coding-agent.toml; do \
	  dst=$(DESTDIR)$(SYSCONFDIR)/airlock/$${f%%:*}; \
	  if [ -e "$$dst" ]; then echo "kept $$dst"; else install -m 0640 $${f#*:} "$$dst" && echo "installed $$dst"; fi; done
	install -d -m 0700 $(DESTDIR)$(STATEDIR)
	install -d -m 0750 $(DESTDIR)$(LOGDIR)
	@chmod 0700 $(DESTDIR)$(STATEDIR); chmod 0750 $(DESTDIR)$(LOGDIR)
	@# Owners only on a real install as root, and only of what make install made:
	@# the operator's own files in /etc/airlock (secrets) keep theirs.
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then \
	  chown root:root $(STATEDIR) $(LOGDIR); \
	  g=$$(getent group airlock >/dev/null && echo airlock || echo root); \
	  chown root:$$g $(SYSCONFDIR)/airlock $(SYSCONFDIR)/airlock/policies; \
	  for f in $(SYSCONFDIR)/airlock/airlock.toml $(SYSCONFDIR)/airlock/policies/coding-agent.toml; do \
	    [ "$$(stat -c %u "$$f")" != 0 ] || chown root:$$g "$$f"; done; fi

uninstall: ## remove what make install put in place, but not /etc/airlock, the state or the logs (docs/operations.md)
	rm -f $(DESTDIR)$(BINDIR)/airlock $(DESTDIR)$(LIBEXECDIR)/airlock $(DESTDIR)$(LIBEXECDIR)/airlock-cli $(DESTDIR)$(LIBEXECDIR)/airlockd $(DESTDIR)$(LIBEXECDIR)/airlock-init \
	      $(DESTDIR)$(UNITDIR)/airlock.service $(DESTDIR)$(SYSCONFDIR)/logrotate.d/airlock
	-rmdir $(DESTDIR)$(LIBEXECDIR) 2>/dev/null

clean: ## remove build output
	rm -rf $(OUT)
	$(GO) clean -testcache
