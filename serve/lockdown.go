package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"airlock/audit"
	"airlock/bpf"
	"airlock/client"
	"airlock/internal/safefile"
)

// LockdownBackend is the kill switch (`airlock lockdown`). A Backend without
// it answers the lockdown routes with "unsupported".
type LockdownBackend interface {
	LockdownState(ctx context.Context) (client.LockdownState, error)
	SetLockdown(ctx context.Context, req client.LockdownRequest, by string) (client.LockdownState, error)
}

func (a *API) lockdownRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("GET "+v+"/lockdown", a.lockdownGet)
	mux.HandleFunc("POST "+v+"/lockdown", a.lockdownSet)
}

func (a *API) lockdownBackend(w http.ResponseWriter, r *http.Request) (LockdownBackend, bool) {
	lb, ok := backendAs[LockdownBackend](a, w, r, "has no kill switch")
	return lb, ok
}

func (a *API) lockdownGet(w http.ResponseWriter, r *http.Request) {
	if lb, ok := a.lockdownBackend(w, r); ok {
		s, err := lb.LockdownState(r.Context())
		a.reply(w, r, s, err)
	}
}

func (a *API) lockdownSet(w http.ResponseWriter, r *http.Request) {
	lb, ok := a.lockdownBackend(w, r)
	if !ok {
		return
	}
	var req client.LockdownRequest
	if !a.decode(w, r, &req) {
		return
	}
	// Who, as every record names a caller: "NAME (uid N)" over the
	// socket, "token@ADDR" over TCP.
	by := Peer(r.Context())
	if by == "" {
		by = "unknown"
	}
	s, err := lb.SetLockdown(r.Context(), req, by)
	a.reply(w, r, s, err)
}

// maxLockdownReason bounds --reason (it is written into every event).
const maxLockdownReason = 500

// lockdownFile holds who engaged the kill switch and why, in the state dir;
// the kernel's pinned map holds the switch itself.
const lockdownFile = "lockdown.json"

// kernelSwitch is the part of the kernel path the kill switch drives
// (*bpf.Path).
type kernelSwitch interface {
	SetLockdown(on bool) error
	Lockdown() (bool, error)
	BlockSandbox(num uint32, b bpf.Block, on bool) error
	SandboxBlock(num uint32) (bpf.Block, error)
}

// lockdown keeps the kill switch's state: the kernel flags first (they
// enforce), who/why in the state dir (it survives a restart of serve).
type lockdown struct {
	mu     sync.Mutex
	file   string
	kernel kernelSwitch
	em     audit.Emitter
	// num returns a live sandbox's kernel id; ok false when it is not live.
	num func(id string) (uint32, bool)
	st  client.LockdownState
}

// restore reads the saved state and re-applies it; a switch found on in the
// kernel with no record is kept on (fail closed) and recorded.
func (l *lockdown) restore(live []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	saved, err := readLockdownFile(l.file)
	if err != nil {
		return err
	}
	on, err := l.kernel.Lockdown()
	if err != nil {
		return err
	}
	if saved.All == nil && on {
		saved.All = &client.LockdownEntry{By: "airlock serve", Reason: "found engaged in the kernel path at start", Since: time.Now().UTC()}
	}
	if saved.All != nil {
		if err := l.kernel.SetLockdown(true); err != nil {
			return err
		}
		l.emit("restored", "", *saved.All, "airlock serve")
	}
	bySandbox := map[string]client.LockdownEntry{}
	for _, e := range saved.Sandboxes {
		bySandbox[e.Sandbox] = e
	}
	l.st = client.LockdownState{All: saved.All}
	for _, id := range live {
		num, ok := l.num(id)
		if !ok {
			continue
		}
		e, recorded := bySandbox[id]
		if !recorded {
			b, err := l.kernel.SandboxBlock(num)
			if err != nil || b&bpf.BlockLockdown == 0 {
				continue
			}
			e = client.LockdownEntry{Sandbox: id, By: "airlock serve", Reason: "found blocked in the kernel path at start", Since: time.Now().UTC()}
		}
		if err := l.kernel.BlockSandbox(num, bpf.BlockLockdown, true); err != nil {
			return err
		}
		l.st.Sandboxes = append(l.st.Sandboxes, e)
		l.emit("restored", id, e, "airlock serve")
	}
	return l.save()
}

func readLockdownFile(path string) (client.LockdownState, error) {
	var s client.LockdownState
	b, err := safefile.Read(path, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("lockdown state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("lockdown state %s: %w (fix or remove it; the kernel path keeps its flags meanwhile)", path, err)
	}
	return s, nil
}

// save writes the state atomically (temp file, rename), mode 0600.
func (l *lockdown) save() error {
	b, err := json.MarshalIndent(l.st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.file), ".lockdown-*")
	if err != nil {
		return fmt.Errorf("lockdown state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("lockdown state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("lockdown state: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.file); err != nil {
		return fmt.Errorf("lockdown state: %w", err)
	}
	return nil
}

func (l *lockdown) emit(action, sandbox string, e client.LockdownEntry, by string) {
	ev := audit.New(audit.KindLockdown, sandbox)
	ev.Reason = e.Reason
	scope := "all"
	if sandbox != "" {
		scope = "sandbox"
	}
	ev.Lockdown = &audit.Lockdown{Action: action, Scope: scope, By: by}
	l.em.Emit(ev)
}

// state returns the current state, listing only live sandboxes.
func (l *lockdown) state() client.LockdownState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := client.LockdownState{All: l.st.All, Sandboxes: []client.LockdownEntry{}}
	for _, e := range l.st.Sandboxes {
		if _, ok := l.num(e.Sandbox); ok {
			out.Sandboxes = append(out.Sandboxes, e)
		}
	}
	sort.Slice(out.Sandboxes, func(i, j int) bool { return out.Sandboxes[i].Sandbox < out.Sandboxes[j].Sandbox })
	return out
}

// set engages or lifts the switch. Engaging writes the kernel first (the
// network is cut before anything else happens); lifting records first, so
// a failure leaves the sandboxes cut, never open.
func (l *lockdown) set(req client.LockdownRequest, by string) (client.LockdownState, error) {
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		return client.LockdownState{}, client.Errorf(client.CodeInvalid, "reason: required (say why, e.g. --reason 'incident 42: exfil suspected')")
	}
	if len(reason) > maxLockdownReason {
		return client.LockdownState{}, client.Errorf(client.CodeInvalid, "reason: %d bytes, at most %d", len(reason), maxLockdownReason)
	}
	entry := client.LockdownEntry{Sandbox: req.Sandbox, By: by, Reason: reason, Since: time.Now().UTC()}
	var err error
	if req.Sandbox == "" {
		err = l.setAll(req.Lift, entry)
	} else {
		err = l.setOne(req.Lift, entry)
	}
	if err != nil {
		return client.LockdownState{}, err
	}
	return l.state(), nil
}

func (l *lockdown) setAll(lift bool, e client.LockdownEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !lift {
		if l.st.All != nil {
			return client.Errorf(client.CodeConflict, "lockdown already engaged by %s since %s: %s", l.st.All.By, l.st.All.Since.Format(time.RFC3339), l.st.All.Reason)
		}
		if err := l.kernel.SetLockdown(true); err != nil {
			return err
		}
		l.st.All = &e
		l.emit("engaged", "", e, e.By)
		if err := l.save(); err != nil {
			return fmt.Errorf("engaged in the kernel path but not recorded: %w", err)
		}
		return nil
	}
	if l.st.All == nil {
		return client.Errorf(client.CodeConflict, "no lockdown of every sandbox to lift")
	}
	prev := l.st.All
	l.st.All = nil
	if err := l.save(); err != nil {
		l.st.All = prev
		return fmt.Errorf("lockdown stays engaged: %w", err)
	}
	if err := l.kernel.SetLockdown(false); err != nil {
		return fmt.Errorf("lockdown stays engaged in the kernel path: %w", err)
	}
	l.emit("lifted", "", e, e.By)
	return nil
}

func (l *lockdown) setOne(lift bool, e client.LockdownEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	num, ok := l.num(e.Sandbox)
	if !ok {
		return client.Errorf(client.CodeNotFound, "no running sandbox %q", e.Sandbox)
	}
	i := -1
	for k, x := range l.st.Sandboxes {
		if x.Sandbox == e.Sandbox {
			i = k
		}
	}
	if !lift {
		if i >= 0 {
			x := l.st.Sandboxes[i]
			return client.Errorf(client.CodeConflict, "sandbox %s already locked down by %s since %s: %s", e.Sandbox, x.By, x.Since.Format(time.RFC3339), x.Reason)
		}
		if err := l.kernel.BlockSandbox(num, bpf.BlockLockdown, true); err != nil {
			return err
		}
		l.st.Sandboxes = append(l.st.Sandboxes, e)
		l.emit("engaged", e.Sandbox, e, e.By)
		if err := l.save(); err != nil {
			return fmt.Errorf("engaged in the kernel path but not recorded: %w", err)
		}
		return nil
	}
	if i < 0 {
		return client.Errorf(client.CodeConflict, "sandbox %s is not locked down", e.Sandbox)
	}
	prev := l.st.Sandboxes
	l.st.Sandboxes = append(append([]client.LockdownEntry{}, prev[:i]...), prev[i+1:]...)
	if err := l.save(); err != nil {
		l.st.Sandboxes = prev
		return fmt.Errorf("sandbox stays locked down: %w", err)
	}
	if err := l.kernel.BlockSandbox(num, bpf.BlockLockdown, false); err != nil {
		return fmt.Errorf("sandbox stays locked down in the kernel path: %w", err)
	}
	l.emit("lifted", e.Sandbox, e, e.By)
	return nil
}

// startLockdown re-applies the saved lockdown once reconcile has adopted
// the running sandboxes.
func (a *Appliance) startLockdown(context.Context) error {
	a.lockdown = &lockdown{
		file: filepath.Join(a.cfg.StateDir, lockdownFile), kernel: a.path, em: a.tap,
		num: a.sandboxNum,
	}
	var live []string
	for _, sb := range a.runner.List() {
		live = append(live, sb.ID)
	}
	live = append(live, a.podIDs()...)
	return a.lockdown.restore(live)
}

// sandboxNum is a live sandbox's kernel id (its attachment's).
func (a *Appliance) sandboxNum(id string) (uint32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.handles[id]
	return h.Sandbox.Num, ok && h.Sandbox.Num != 0
}

// LockdownState is GET /v1/lockdown (LockdownBackend).
func (a *Appliance) LockdownState(context.Context) (client.LockdownState, error) {
	return a.lockdown.state(), nil
}

// SetLockdown is POST /v1/lockdown (LockdownBackend).
func (a *Appliance) SetLockdown(_ context.Context, req client.LockdownRequest, by string) (client.LockdownState, error) {
	return a.lockdown.set(req, by)
}
