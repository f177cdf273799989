//go:build tools

// Package deps pins the project's chosen dependencies in go.mod before every
// package imports them, so that parallel work never races on go.mod.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/cilium/ebpf"
	_ "github.com/cilium/ebpf/link"
	_ "github.com/containers/podman/v5/pkg/bindings"
	_ "github.com/containers/podman/v5/pkg/bindings/containers"
	_ "github.com/containers/podman/v5/pkg/bindings/images"
	_ "github.com/containers/podman/v5/pkg/specgen"
	_ "github.com/elazarl/goproxy"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/nftables"
	_ "github.com/hashicorp/golang-lru/v2"
	_ "github.com/miekg/dns"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/net/idna"
	_ "golang.org/x/sync/singleflight"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/time/rate"
	_ "modernc.org/sqlite"
)
