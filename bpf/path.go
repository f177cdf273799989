package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrVerifier is wrapped when the kernel's verifier rejects the program; the
// error text carries the verifier's full log.
var ErrVerifier = errors.New("verifier rejected the steering program")

// ErrNotPinned is returned by Reopen when no pinned path exists.
var ErrNotPinned = errors.New("no pinned steering path")

// Path is the loaded steering program with its pinned maps. Its methods are
// safe for concurrent use. Close releases this process's handles; the pins,
// attachments and host guards stay (fail closed). Teardown removes them all.
type Path struct {
	dir   string // versioned pin directory
	root  string // the pin dir given to Open
	opts  Options
	log   *slog.Logger
	objs  steerObjects
	mu    sync.Mutex
	names map[uint32]string // sandbox num -> name, for events
}

// Open loads the steering program, reusing the maps pinned under pinDir (the
// default is DefaultPinDir) or creating and pinning them, re-points every
// pinned TCX link at the freshly loaded program, and installs the host
// guards. Calling Open again in a new process (a restarted appliance) is how
// the path is reopened: sandboxes keep their attachments throughout.
func Open(pinDir string, opts Options) (*Path, error) {
	opts = opts.withDefaults()
	if err := opts.Guard.validate(); err != nil {
		return nil, err
	}
	if err := Probe(); err != nil {
		return nil, err
	}
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	if err := ensureBPFFS(pinDir); err != nil {
		return nil, err
	}
	p := &Path{
		root: pinDir, dir: filepath.Join(pinDir, pinVersion), opts: opts,
		log: opts.Logger, names: map[uint32]string{},
	}
	if err := os.MkdirAll(filepath.Join(p.dir, "links"), 0o700); err != nil {
		return nil, fmt.Errorf("bpf: create pin dir: %w", err)
	}
	if err := p.load(); err != nil {
		return nil, err
	}
	if err := p.adopt(); err != nil {
		p.objs.Close()
		return nil, err
	}
	if err := installGuards(opts.Guard); err != nil {
		p.objs.Close()
		return nil, err
	}
	return p, nil
}

// Reopen is Open for a path that must already be pinned (a restarted
// appliance): it fails with ErrNotPinned instead of creating a fresh one.
func Reopen(pinDir string, opts Options) (*Path, error) {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	if _, err := os.Stat(filepath.Join(pinDir, pinVersion, "alk_config")); err != nil {
		return nil, fmt.Errorf("bpf: reopen %s: %w", pinDir, ErrNotPinned)
	}
	return Open(pinDir, opts)
}

func (p *Path) load() error {
	spec, err := loadSteer()
	if err != nil {
		return fmt.Errorf("bpf: parse embedded object: %w", err)
	}
	vars := map[string]any{
		"steer_mark":      p.opts.Guard.Mark,
		"event_budget":    p.opts.EventBudget,
		"event_window_ns": uint64(p.opts.EventWindow.Nanoseconds()),
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("bpf: set %s: %w", name, err)
		}
	}
	err = spec.LoadAndAssign(&p.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: p.dir},
	})
	if err != nil {
		return loadErr(err)
	}
	// The program pin is for inspection (bpftool); links hold their own
	// reference, so a failure here is only logged.
	progPin := filepath.Join(p.dir, "prog_steer")
	_ = os.Remove(progPin)
	if err := p.objs.AlkSteer.Pin(progPin); err != nil {
		p.log.Warn("bpf: pin program", "path", progPin, "err", err)
	}
	return nil
}

// loadErr keeps the verifier's whole log in the error text.
func loadErr(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("bpf: %w:\n%+v", ErrVerifier, ve)
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return fmt.Errorf("bpf: a pinned map's layout differs from this build (bump pinVersion): %w", err)
	}
	return fmt.Errorf("bpf: load steering program: %w", err)
}

// ensureBPFFS mounts bpffs on /sys/fs/bpf when pinDir lives there and it is
// not mounted; pin dirs elsewhere must already be on a bpffs.
func ensureBPFFS(pinDir string) error {
	mnt := "/sys/fs/bpf"
	if isBPFFS(mnt) {
		return nil
	}
	if !strings.HasPrefix(filepath.Clean(pinDir)+"/", mnt+"/") {
		return fmt.Errorf("bpf: pin dir %s is not under %s and bpffs is not mounted", pinDir, mnt)
	}
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("bpf: mount bpffs on %s: %w", mnt, err)
	}
	return nil
}

func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// Close releases this process's handles. Pins, links and guards remain, so
// the path keeps enforcing (and, with no sockets, dropping).
func (p *Path) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.objs.Close()
}

// Teardown detaches every pinned link, removes the pins and the host guards,
// and closes p. For uninstall and tests; a running appliance never calls it.
func (p *Path) Teardown() error {
	var errs []error
	handles, err := p.Handles()
	errs = append(errs, err)
	for _, h := range handles {
		errs = append(errs, p.Detach(h))
	}
	errs = append(errs, p.Close())
	errs = append(errs, os.RemoveAll(p.dir))
	if entries, err := os.ReadDir(p.root); err == nil && len(entries) == 0 {
		errs = append(errs, os.Remove(p.root))
	}
	errs = append(errs, removeGuards(p.opts.Guard))
	return errors.Join(errs...)
}

// PinDir is the versioned directory holding the pins.
func (p *Path) PinDir() string { return p.dir }

// Guard is the effective host-guard configuration (defaults filled in).
func (p *Path) Guard() GuardConfig { return p.opts.Guard }
