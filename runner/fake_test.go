package runner

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// transcript records calls in order, from the fake engine, the fake host
// network and the hooks.
type transcript struct {
	mu    sync.Mutex
	lines []string
}

func (t *transcript) add(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

func (t *transcript) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n") + "\n"
}

func (t *transcript) index(prefix string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.IndexFunc(t.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

type fakeContainer struct {
	spec    Spec
	running bool
	files   map[string]string // path -> content
}

// fakeEngine is an in-memory Engine that records every call.
type fakeEngine struct {
	t          *transcript
	mu         sync.Mutex
	n          int
	containers map[string]*fakeContainer
	execFn     func(ctx context.Context, p Process) (ExitStatus, error)
	pauseErr   error
}

func newFakeEngine(t *transcript) *fakeEngine {
	return &fakeEngine{t: t, containers: map[string]*fakeContainer{}}
}

func (f *fakeEngine) get(id string) (*fakeContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, ErrNotFound)
	}
	return c, nil
}

func (f *fakeEngine) ImageID(_ context.Context, ref string) (string, error) {
	f.t.add("engine.ImageID %s", ref)
	if ref == "missing" {
		return "", fmt.Errorf("image %s: %w", ref, ErrNotFound)
	}
	return "sha256:" + ref, nil
}

func (f *fakeEngine) Create(_ context.Context, s Spec) (string, error) {
	f.mu.Lock()
	f.n++
	id := fmt.Sprintf("c%d", f.n)
	f.containers[id] = &fakeContainer{spec: s, files: map[string]string{}}
	f.mu.Unlock()
	f.t.add("engine.Create %s name=%s image=%s command=%q", id, s.Name, s.Image, s.Command)
	return id, nil
}

func (f *fakeEngine) Start(_ context.Context, id string) error {
	f.t.add("engine.Start %s", id)
	c, err := f.get(id)
	if err == nil {
		c.running = true
	}
	return err
}

func (f *fakeEngine) Inspect(_ context.Context, id string) (Container, error) {
	f.t.add("engine.Inspect %s", id)
	c, err := f.get(id)
	if err != nil {
		return Container{}, err
	}
	return Container{ID: id, Name: c.spec.Name, Image: c.spec.Image, Running: c.running, Pid: 4242, Labels: c.spec.Labels}, nil
}

func (f *fakeEngine) List(_ context.Context, labels map[string]string) ([]Container, error) {
	f.t.add("engine.List %v", labels)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Container
	for _, id := range slices.Sorted(maps.Keys(f.containers)) {
		c := f.containers[id]
		match := true
		for k, v := range labels {
			match = match && c.spec.Labels[k] == v
		}
		if match {
			out = append(out, Container{ID: id, Name: c.spec.Name, Running: c.running, Pid: 4242, Labels: c.spec.Labels})
		}
	}
	return out, nil
}

func (f *fakeEngine) Exec(ctx context.Context, id string, p Process, started func()) (ExitStatus, error) {
	f.t.add("engine.Exec %s argv=%q cwd=%s env=%q stdin=%t", id, p.Argv, p.Cwd, p.Env, p.Stdin != nil)
	if _, err := f.get(id); err != nil {
		return ExitStatus{}, err
	}
	started()
	if f.execFn != nil {
		return f.execFn(ctx, p)
	}
	if p.Argv[0] == "echo" {
		fmt.Fprintln(p.Stdout, strings.Join(p.Argv[1:], " "))
	}
	if p.Argv[0] == "false" {
		return ExitStatus{Code: 1}, nil
	}
	return ExitStatus{}, nil
}

func (f *fakeEngine) CopyIn(_ context.Context, id, dir string, r io.Reader) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			f.mu.Lock()
			c.files[strings.TrimSuffix(dir, "/")+"/"+h.Name] = string(b)
			f.mu.Unlock()
			names = append(names, h.Name)
		}
	}
	f.t.add("engine.CopyIn %s %s files=%q", id, dir, names)
	return nil
}

func (f *fakeEngine) CopyOut(_ context.Context, id, path string, w io.Writer) error {
	f.t.add("engine.CopyOut %s %s", id, path)
	c, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tw := tar.NewWriter(w)
	found := false
	for _, name := range slices.Sorted(maps.Keys(c.files)) {
		rel, ok := strings.CutPrefix(name, path)
		if !ok {
			continue
		}
		found = true
		base := path[strings.LastIndex(path, "/")+1:]
		body := c.files[name]
		tw.WriteHeader(&tar.Header{Name: base + rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		io.WriteString(tw, body)
	}
	if !found && path != WorkspaceDir {
		return fmt.Errorf("%s: %w", path, ErrNotFound)
	}
	return tw.Close()
}

func (f *fakeEngine) Pause(_ context.Context, id string) error {
	f.t.add("engine.Pause %s", id)
	return f.pauseErr
}

func (f *fakeEngine) Resume(_ context.Context, id string) error {
	f.t.add("engine.Resume %s", id)
	return nil
}

func (f *fakeEngine) Commit(_ context.Context, id, repo, tag string) (string, error) {
	f.t.add("engine.Commit %s %s:%s", id, repo, tag)
	return "sha256:snap", nil
}

func (f *fakeEngine) Remove(_ context.Context, id string) error {
	f.t.add("engine.Remove %s", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
	return nil
}

// fakeNet is hostNet in memory.
type fakeNet struct {
	t     *transcript
	mu    sync.Mutex
	links map[string]string // name -> alias
	next  int
}

func (n *fakeNet) AddVeth(host, peer, alias string, mac net.HardwareAddr) (int, error) {
	n.t.add("net.AddVeth %s %s alias=%s mac=%s", host, peer, alias, mac)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links[host] = alias
	n.next++
	return 100 + n.next, nil
}

func (n *fakeNet) UpHost(host string, addr, gw netip.Addr) error {
	n.t.add("net.UpHost %s addr=%s gw=%s", host, addr, gw)
	return nil
}

func (n *fakeNet) MoveIn(peer string, pid int, addr, gw netip.Addr) error {
	n.t.add("net.MoveIn %s pid=%d addr=%s gw=%s", peer, pid, addr, gw)
	return nil
}

func (n *fakeNet) Index(name string) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.links[name]; !ok {
		return 0, ErrNotFound
	}
	return 200, nil
}

func (n *fakeNet) DelLink(name string) error {
	n.t.add("net.DelLink %s", name)
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.links, name)
	return nil
}

func (n *fakeNet) Links(prefix string) (map[string]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]string{}
	for k, v := range n.links {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out, nil
}

// Changes lists the fake container's files as added.
func (f *fakeEngine) Changes(_ context.Context, id string) ([]Change, error) {
	c, err := f.get(id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Change
	for _, p := range slices.Sorted(maps.Keys(c.files)) {
		out = append(out, Change{Path: p, Kind: "added"})
	}
	return out, nil
}
