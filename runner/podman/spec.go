package podman

import (
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"airlock/runner"
)

// SpecGen translates a runner.Spec into Podman's spec generator, field by
// field, as the 4.3 service understands it (see ../../shared/notes).
func SpecGen(s runner.Spec) *specgen.SpecGenerator {
	g := specgen.NewSpecGenerator(s.Image, false)
	g.Name = s.Name
	g.Entrypoint = s.Entrypoint
	g.Command = s.Command
	g.Hostname = s.Hostname
	g.Env = s.Env
	g.WorkDir = s.WorkDir
	g.Labels = s.Labels
	g.CapDrop = s.CapDrop
	g.CapAdd = s.CapAdd
	g.NoNewPrivileges = &s.NoNewPrivileges
	g.ReadOnlyFilesystem = &s.ReadOnlyRoot
	g.Init = &s.Init
	g.Terminal = new(bool)
	if s.NetworkNone {
		g.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	}
	for _, m := range s.Mounts {
		opts := append([]string{}, m.Options...)
		if m.Type == "bind" {
			opts = append(opts, "rbind")
		}
		g.Mounts = append(g.Mounts, spec.Mount{Type: m.Type, Source: m.Source, Destination: m.Destination, Options: opts})
	}
	for _, r := range s.Rlimits {
		g.Rlimits = append(g.Rlimits, spec.POSIXRlimit{Type: r.Type, Soft: r.Soft, Hard: r.Hard})
	}
	if s.MemoryBytes > 0 || s.CPUQuota > 0 || s.Pids > 0 {
		res := &spec.LinuxResources{}
		if s.MemoryBytes > 0 {
			res.Memory = &spec.LinuxMemory{Limit: &s.MemoryBytes}
		}
		if s.CPUQuota > 0 {
			period := uint64(100000)
			res.CPU = &spec.LinuxCPU{Quota: &s.CPUQuota, Period: &period}
		}
		if s.Pids > 0 {
			res.Pids = &spec.LinuxPids{Limit: s.Pids}
		}
		g.ResourceLimits = res
	}
	return g
}
