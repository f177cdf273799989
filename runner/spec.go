package runner

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Labels Airlock puts on its containers. LabelManaged marks every container
// the runner created; reconcile only ever touches containers carrying it with
// the runner's own instance.
const (
	LabelManaged   = "io.airlock.managed"
	LabelInstance  = "io.airlock.instance"
	LabelSandbox   = "io.airlock.sandbox"
	LabelPolicy    = "io.airlock.policy"
	LabelAddress   = "io.airlock.address"
	LabelImage     = "io.airlock.image"
	LabelCreated   = "io.airlock.created"
	LabelDeadline  = "io.airlock.deadline"
	LabelIdle      = "io.airlock.idle-timeout"
	LabelExecLimit = "io.airlock.exec-timeout"
	LabelWorkspace = "io.airlock.workspace"
	LabelReadOnly  = "io.airlock.read-only"
	LabelCapAdd    = "io.airlock.cap-add"
	LabelAgent     = "io.airlock.agent"   // "airlock-init" when the agent is PID 1
	LabelOutputs   = "io.airlock.outputs" // JSON list of the declared output paths
	LabelImageID   = "io.airlock.image-id"
	LabelTemplate  = "io.airlock.template" // NAME:vN
)

// Paths inside the sandbox.
const (
	WorkspaceDir = "/workspace"
	// CABundlePath is where the bundle (image roots plus Airlock's CA) is
	// mounted; caBundleAltPaths are the other standard locations.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// caBundleAltPaths are further standard CA bundle paths the bundle is
// mounted at (RHEL-like and Alpine-like layouts).
var caBundleAltPaths = []string{"/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

var caEnvVars = []string{
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
	"GIT_SSL_CAINFO", "PIP_CERT", "CURL_CA_BUNDLE",
}

// CAEnvVars returns the variables pointed at the CA bundle (a copy).
func CAEnvVars() []string { return slices.Clone(caEnvVars) }

// The in-sandbox agent: the host directory holding airlock-init is
// bind-mounted read-only at AgentMountDir and the binary is the entrypoint
// (PID 1). It waits, like holdCommand, until the appliance dials it.
const (
	AgentMountDir   = "/.airlock"
	AgentEntrypoint = AgentMountDir + "/airlock-init"
	AgentName       = "airlock-init" // Sandbox.Agent when it is in use
	PodmanExecName  = "podman-exec"  // Sandbox.Agent when commands go through the engine
)

// holdCommand is the sandbox's init: it holds the container open while the
// network path is put in place, so no user process runs before that.
var holdCommand = []string{"sleep", "2147483647"}

// The capability sets are unexported so no importer can widen them; the
// accessors return copies.
var (
	defaultCaps = []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
		"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
	}
	allowedCapAdd = []string{"CAP_NET_RAW", "CAP_NET_ADMIN"}
)

// DefaultCaps returns the minimal capability set kept after dropping all:
// enough for package managers and file ownership inside the user
// namespace; no NET_RAW, NET_ADMIN, SYS_ADMIN or SYS_PTRACE.
func DefaultCaps() []string { return slices.Clone(defaultCaps) }

// AllowedCapAdd returns the only capabilities CreateRequest.CapAdd may add
// to DefaultCaps. They act on the sandbox's own network namespace (behind
// its veth and the appliance's path), never on the host's.
func AllowedCapAdd() []string { return slices.Clone(allowedCapAdd) }

// NormalizeCapAdd validates a CreateRequest.CapAdd list and returns it in
// canonical form (CAP_ prefix, upper case, sorted, no duplicates). A name
// outside AllowedCapAdd is an ErrInvalid naming it and what is allowed.
func NormalizeCapAdd(caps []string) ([]string, error) {
	var out []string
	for _, c := range caps {
		n := strings.ToUpper(strings.TrimSpace(c))
		if n != "" && !strings.HasPrefix(n, "CAP_") {
			n = "CAP_" + n
		}
		if !slices.Contains(allowedCapAdd, n) {
			return nil, fmt.Errorf("capability %q is not allowed in CapAdd: only NET_RAW and NET_ADMIN may be added to the default set (%s): %w",
				c, strings.Join(defaultCaps, ", "), ErrInvalid)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// writableWhenReadOnly are the tmpfs mounts of a read-only sandbox.
var writableWhenReadOnly = []string{"/tmp", "/var/tmp", "/run"}

// Spec is the engine-neutral description of a sandbox container. It is all
// data: BuildSpec computes it without I/O and the engine adapter translates
// it field by field.
type Spec struct {
	Name            string            `json:"name"`
	Image           string            `json:"image"`
	Entrypoint      []string          `json:"entrypoint,omitempty"`
	Command         []string          `json:"command"`
	Hostname        string            `json:"hostname"`
	Env             map[string]string `json:"env"`
	WorkDir         string            `json:"work_dir"`
	Labels          map[string]string `json:"labels"`
	Mounts          []Mount           `json:"mounts"`
	NetworkNone     bool              `json:"network_none"`
	Init            bool              `json:"init"`
	ReadOnlyRoot    bool              `json:"read_only_root"`
	CapDrop         []string          `json:"cap_drop"`
	CapAdd          []string          `json:"cap_add"`
	NoNewPrivileges bool              `json:"no_new_privileges"`
	Rlimits         []Rlimit          `json:"rlimits"`
	// Cgroup limits; zero means unset. Only set where the host enforces them.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	CPUQuota    int64 `json:"cpu_quota,omitempty"` // microseconds per 100ms period
	Pids        int64 `json:"pids,omitempty"`
}

// Mount is a bind or tmpfs mount.
type Mount struct {
	Type        string   `json:"type"` // bind | tmpfs
	Source      string   `json:"source,omitempty"`
	Destination string   `json:"destination"`
	Options     []string `json:"options,omitempty"`
}

// Rlimit is a POSIX rlimit with the lowercase name Podman 4.3 accepts.
type Rlimit struct {
	Type string `json:"type"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// SpecInput is everything BuildSpec needs, resolved beforehand.
type SpecInput struct {
	Instance    string
	ID          string
	Req         CreateRequest
	Address     netip.Addr // invalid when the sandbox gets no network
	Gateway     netip.Addr
	ProxyURL    string // HTTP(S)_PROXY convenience value; empty: none
	ResolvConf  string // host file mounted at /etc/resolv.conf; empty: none
	CABundle    string // host file mounted at the CA paths; empty: none
	Created     time.Time
	Deadline    time.Time // zero: no lifetime limit
	ExecTimeout time.Duration
	Cgroups     CgroupSupport
	// AgentDir is the host directory holding airlock-init; empty: no
	// agent (holdCommand under catatonit, commands through the engine).
	AgentDir string
	// ImageID is the image's ID (its digest) and Template the template
	// version it came from ("" for a plain image), recorded in labels.
	ImageID, Template string
	// Pool is a warm pool member's pool key (LabelPool); empty: none.
	Pool string
}

// CgroupSupport says which cgroup limits the host enforces for rootless
// containers.
type CgroupSupport struct {
	Memory, CPU, Pids bool
}

// BuildSpec computes the container spec of a sandbox. It is pure.
func BuildSpec(in SpecInput) Spec {
	r := in.Req
	s := Spec{
		Name:            ContainerName(in.ID),
		Image:           r.Image,
		Command:         slices.Clone(holdCommand),
		Hostname:        "sandbox-" + in.ID,
		Env:             sandboxEnv(in),
		WorkDir:         WorkspaceDir,
		Labels:          sandboxLabels(in),
		NetworkNone:     true,
		Init:            true,
		ReadOnlyRoot:    r.ReadOnlyRoot,
		CapDrop:         []string{"ALL"},
		CapAdd:          capAdd(r.CapAdd),
		NoNewPrivileges: true,
		Rlimits:         rlimits(r.Limits),
	}
	s.Mounts = sandboxMounts(in)
	if in.AgentDir != "" {
		s.Entrypoint, s.Command, s.Init = []string{AgentEntrypoint}, nil, false
		s.Labels[LabelAgent] = AgentName
		s.Mounts = append(s.Mounts, Mount{Type: "bind", Source: in.AgentDir, Destination: AgentMountDir, Options: []string{"ro"}})
	}
	if in.Cgroups.Memory {
		s.MemoryBytes = r.Limits.MemoryBytes
	}
	if in.Cgroups.CPU && r.Limits.CPUs > 0 {
		s.CPUQuota = int64(r.Limits.CPUs * 100000)
	}
	if in.Cgroups.Pids {
		s.Pids = r.Limits.Pids
	}
	return s
}

// capAdd is defaultCaps plus the request's valid extra capabilities (an
// invalid name never gets here: Create validates first; BuildSpec drops it).
func capAdd(extra []string) []string {
	caps := slices.Clone(defaultCaps)
	for _, c := range extra {
		if n, err := NormalizeCapAdd([]string{c}); err == nil && !slices.Contains(caps, n[0]) {
			caps = append(caps, n[0])
		}
	}
	return caps
}

// ContainerName is the container name of sandbox id.
func ContainerName(id string) string { return "airlock-" + id }

func sandboxEnv(in SpecInput) map[string]string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root",
		"LANG": "C.UTF-8",
	}
	if in.CABundle != "" {
		for _, k := range caEnvVars {
			env[k] = CABundlePath
		}
	}
	if in.ProxyURL != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = in.ProxyURL
		}
		env["NO_PROXY"] = "localhost,127.0.0.1"
		env["no_proxy"] = env["NO_PROXY"]
	}
	maps.Copy(env, in.Req.Env)
	env["AIRLOCK_SANDBOX"] = in.ID
	return env
}

func sandboxLabels(in SpecInput) map[string]string {
	l := map[string]string{
		LabelManaged:  "true",
		LabelInstance: in.Instance,
		LabelSandbox:  in.ID,
		LabelPolicy:   in.Req.Policy,
		LabelImage:    in.Req.Image,
		LabelCreated:  in.Created.UTC().Format(time.RFC3339Nano),
		LabelReadOnly: strconv.FormatBool(in.Req.ReadOnlyRoot),
	}
	if in.Address.IsValid() {
		l[LabelAddress] = in.Address.String()
	}
	if caps, err := NormalizeCapAdd(in.Req.CapAdd); err == nil && len(caps) > 0 {
		l[LabelCapAdd] = strings.Join(caps, ",")
	}
	if in.ImageID != "" {
		l[LabelImageID] = in.ImageID
	}
	if in.Template != "" {
		l[LabelTemplate] = in.Template
	}
	if in.Pool != "" {
		l[LabelPool] = in.Pool
	}
	if len(in.Req.Outputs) > 0 {
		b, _ := json.Marshal(in.Req.Outputs)
		l[LabelOutputs] = string(b)
	}
	if !in.Deadline.IsZero() {
		l[LabelDeadline] = in.Deadline.UTC().Format(time.RFC3339Nano)
	}
	if in.ExecTimeout > 0 {
		l[LabelExecLimit] = in.ExecTimeout.String()
	}
	if in.Req.IdleTimeout > 0 {
		l[LabelIdle] = in.Req.IdleTimeout.String()
	}
	if w := in.Req.Workspace; w.HostDir != "" {
		l[LabelWorkspace] = string(w.Mode) + ":" + w.HostDir
	}
	return l
}

func sandboxMounts(in SpecInput) []Mount {
	var m []Mount
	if w := in.Req.Workspace; w.HostDir != "" && w.Mode == WorkspaceBind {
		m = append(m, Mount{Type: "bind", Source: w.HostDir, Destination: WorkspaceDir, Options: []string{"rw"}})
	}
	if in.ResolvConf != "" {
		m = append(m, Mount{Type: "bind", Source: in.ResolvConf, Destination: "/etc/resolv.conf", Options: []string{"ro"}})
	}
	if in.CABundle != "" {
		for _, p := range append([]string{CABundlePath}, caBundleAltPaths...) {
			m = append(m, Mount{Type: "bind", Source: in.CABundle, Destination: p, Options: []string{"ro"}})
		}
	}
	if in.Req.ReadOnlyRoot {
		tmpfs := writableWhenReadOnly
		if in.Req.Workspace.Mode != WorkspaceBind || in.Req.Workspace.HostDir == "" {
			tmpfs = append([]string{WorkspaceDir}, tmpfs...)
		}
		for _, p := range tmpfs {
			m = append(m, Mount{Type: "tmpfs", Source: "tmpfs", Destination: p,
				Options: []string{"rw", "nosuid", "nodev", "mode=1777", "size=268435456"}})
		}
	}
	return m
}

func rlimits(l Limits) []Rlimit {
	nofile := l.NoFile
	if nofile == 0 {
		nofile = DefaultNoFile
	}
	r := []Rlimit{{Type: "nofile", Soft: nofile, Hard: nofile}}
	if l.FileSizeBytes > 0 {
		r = append(r, Rlimit{Type: "fsize", Soft: l.FileSizeBytes, Hard: l.FileSizeBytes})
	}
	return r
}
