package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/internal/safefile"
)

// TemplateRepo is the local image repository templates are committed to,
// tagged vN.
const TemplateRepo = "localhost/airlock/template"

// TemplateRequest asks for a template: a sandbox from From, under Policy,
// runs Setup (shell lines, in order); its filesystem is committed.
type TemplateRequest struct {
	Name       string
	From       string // image reference
	Setup      []string
	Policy     string
	PolicyHash string // recorded with the template
	// ExecTimeout bounds each setup command; 0: the runner's default.
	ExecTimeout time.Duration
	// Explain is called when a setup command fails, before the build
	// sandbox is removed, for what the network path refused it (denials).
	Explain func(sandbox string) []string
}

// TemplateStep is one setup command of a template build.
type TemplateStep struct {
	Command    string `json:"command"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	TimedOut   bool   `json:"timed_out,omitempty"`
}

// Template is one recorded template version.
type Template struct {
	Name        string         `json:"name"`
	Version     int            `json:"version"`
	Ref         string         `json:"ref"`   // NAME:vN
	Image       string         `json:"image"` // TemplateRepo/NAME:vN
	ImageID     string         `json:"image_id"`
	From        string         `json:"from"`
	FromImageID string         `json:"from_image_id"`
	Setup       []TemplateStep `json:"setup"`
	Policy      string         `json:"policy"`
	PolicyHash  string         `json:"policy_hash,omitempty"`
	Sandbox     string         `json:"sandbox"` // the build sandbox (its events and artifacts)
	Created     time.Time      `json:"created"`
	BuildLog    string         `json:"build_log"` // file, beside the record
	// Snapshot is set for a template made from a running sandbox: what it
	// changed against its image and what looks sensitive in it.
	Snapshot *SnapshotSummary `json:"snapshot,omitempty"`
}

// TemplateError is a build that failed at a setup command.
type TemplateError struct {
	Name     string
	Step     int // 1-based
	Command  string
	ExitCode int
	TimedOut bool
	Output   string   // the command's output, its tail when long
	Denials  []string // what the network path refused meanwhile
	Sandbox  string
}

func (e *TemplateError) Error() string {
	how := fmt.Sprintf("exited %d", e.ExitCode)
	if e.TimedOut {
		how = "timed out"
	}
	s := fmt.Sprintf("template %s: setup command %d %q %s (build sandbox %s; no template was recorded)", e.Name, e.Step, e.Command, how, e.Sandbox)
	if len(e.Denials) > 0 {
		s += "; denied: " + strings.Join(e.Denials, "; ")
	}
	if e.Output != "" {
		s += "; output:\n" + e.Output
	}
	return s
}

func (e *TemplateError) Unwrap() error { return ErrInvalid }

var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func (r *Runner) templatesDir() string { return r.cfg.TemplateDir }

// BuildTemplate builds and records a template version. A failing setup
// command stops the build (a *TemplateError); nothing is recorded and no
// image is left. The build sandbox is destroyed either way (its artifacts
// and events stay).
func (r *Runner) BuildTemplate(ctx context.Context, req TemplateRequest) (Template, error) {
	if !templateName.MatchString(req.Name) {
		return Template{}, fmt.Errorf("template name %q: want lowercase letters, digits, '.', '_' or '-' (at most 63): %w", req.Name, ErrInvalid)
	}
	fromID, err := r.cfg.Engine.ImageID(ctx, req.From)
	if err != nil {
		return Template{}, fmt.Errorf("template %s: image %s: %w", req.Name, req.From, err)
	}
	sb, err := r.Create(ctx, CreateRequest{Image: req.From, Policy: req.Policy, ExecTimeout: req.ExecTimeout})
	if err != nil {
		return Template{}, fmt.Errorf("template %s: build sandbox: %w", req.Name, err)
	}
	defer func() {
		if err := r.destroy(context.WithoutCancel(ctx), sb.ID, "template "+req.Name+" build done"); err != nil {
			r.log.Warn("template: destroy the build sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	var log bytes.Buffer
	steps, err := r.runSetup(ctx, sb.ID, req, &log)
	if err != nil {
		return Template{}, err
	}
	return r.commitTemplate(ctx, sb, req, fromID, steps, log.Bytes(), nil)
}

func (r *Runner) runSetup(ctx context.Context, id string, req TemplateRequest, log *bytes.Buffer) ([]TemplateStep, error) {
	var steps []TemplateStep
	for i, line := range req.Setup {
		fmt.Fprintf(log, "$ %s\n", line)
		var out bytes.Buffer
		w := &discardErr{w: &out}
		res, err := r.Exec(ctx, id, ExecRequest{Shell: line, Stdout: w, Stderr: w, MaxCapture: 64 << 10})
		log.Write(out.Bytes())
		if err != nil {
			return nil, fmt.Errorf("template %s: setup command %d %q: %w", req.Name, i+1, line, err)
		}
		fmt.Fprintf(log, "[exit %d in %s]\n", res.ExitCode, res.Duration.Round(time.Millisecond))
		steps = append(steps, TemplateStep{Command: line, ExitCode: res.ExitCode, DurationMS: res.Duration.Milliseconds(), TimedOut: res.TimedOut})
		if res.ExitCode != 0 || res.TimedOut {
			te := &TemplateError{Name: req.Name, Step: i + 1, Command: line, ExitCode: res.ExitCode, TimedOut: res.TimedOut,
				Output: tail(out.Bytes(), 4096), Sandbox: id}
			if req.Explain != nil {
				te.Denials = req.Explain(id)
			}
			return nil, te
		}
	}
	return steps, nil
}

// commitTemplate commits the build sandbox and writes the record (the
// record last: an image without a record is removed).
func (r *Runner) commitTemplate(ctx context.Context, sb Sandbox, req TemplateRequest, fromID string, steps []TemplateStep, log []byte, snap *SnapshotSummary) (Template, error) {
	dir := filepath.Join(r.templatesDir(), req.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Template{}, fmt.Errorf("template %s: %w", req.Name, err)
	}
	v := r.nextVersion(req.Name)
	tag := "v" + strconv.Itoa(v)
	imageID, err := r.cfg.Engine.Commit(ctx, sb.ContainerID, TemplateRepo+"/"+req.Name, tag)
	if err != nil {
		return Template{}, fmt.Errorf("template %s: commit: %w", req.Name, err)
	}
	t := Template{Name: req.Name, Version: v, Ref: req.Name + ":" + tag, Image: TemplateRepo + "/" + req.Name + ":" + tag,
		ImageID: imageID, From: req.From, FromImageID: fromID, Setup: steps, Policy: req.Policy, PolicyHash: req.PolicyHash,
		Sandbox: sb.ID, Created: r.cfg.Now().UTC(), BuildLog: tag + ".log", Snapshot: snap}
	if steps == nil {
		t.Setup = []TemplateStep{}
	}
	b, _ := json.MarshalIndent(t, "", "  ")
	err = safefile.WriteAtomic(filepath.Join(dir, tag+".log"), log, 0o600)
	if err == nil {
		err = safefile.WriteAtomic(filepath.Join(dir, tag+".json"), append(b, '\n'), 0o600)
	}
	if err != nil {
		r.removeImage(ctx, t.Image)
		return Template{}, fmt.Errorf("template %s: record: %w", req.Name, err)
	}
	r.lifecycleBy(ctx, sb, "template", fmt.Sprintf("template %s committed: image %s (%s) from %s (%s), %d setup commands",
		t.Ref, t.Image, imageID, req.From, fromID, len(steps)))
	return t, nil
}

func (r *Runner) nextVersion(name string) int {
	ts, _ := r.templateVersions(name)
	if len(ts) == 0 {
		return 1
	}
	return ts[len(ts)-1].Version + 1
}

// templateVersions returns a template's versions, oldest first.
func (r *Runner) templateVersions(name string) ([]Template, error) {
	ents, err := os.ReadDir(filepath.Join(r.templatesDir(), name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Template
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.templatesDir(), name, e.Name()))
		if err != nil {
			return nil, err
		}
		var t Template
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("template record %s/%s: %w", name, e.Name(), err)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Templates lists every recorded template version, by name then version.
func (r *Runner) Templates() ([]Template, error) {
	ents, err := os.ReadDir(r.templatesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Template
	for _, e := range ents {
		if !e.IsDir() || !templateName.MatchString(e.Name()) {
			continue
		}
		ts, err := r.templateVersions(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

// Template returns a template version: "NAME" (the newest) or "NAME:vN".
func (r *Runner) Template(ref string) (Template, error) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !templateName.MatchString(name) {
		return Template{}, fmt.Errorf("template %q: bad name: %w", ref, ErrInvalid)
	}
	ts, err := r.templateVersions(name)
	if err != nil {
		return Template{}, err
	}
	for i := len(ts) - 1; i >= 0; i-- {
		if !hasTag || "v"+strconv.Itoa(ts[i].Version) == tag {
			return ts[i], nil
		}
	}
	return Template{}, fmt.Errorf("template %q: %w (see `airlock template ls`)", ref, ErrNotFound)
}

// RemoveTemplate removes a template version ("NAME:vN") or every version
// ("NAME"): records, build logs and images. A version a sandbox runs from
// is refused.
func (r *Runner) RemoveTemplate(ctx context.Context, ref string) ([]string, error) {
	name, _, hasTag := strings.Cut(ref, ":")
	var todo []Template
	if hasTag {
		t, err := r.Template(ref)
		if err != nil {
			return nil, err
		}
		todo = []Template{t}
	} else {
		if !templateName.MatchString(name) {
			return nil, fmt.Errorf("template %q: bad name: %w", ref, ErrInvalid)
		}
		var err error
		if todo, err = r.templateVersions(name); err != nil {
			return nil, err
		}
		if len(todo) == 0 {
			return nil, fmt.Errorf("template %q: %w", ref, ErrNotFound)
		}
	}
	for _, sb := range r.List() {
		for _, t := range todo {
			if sb.Template == t.Ref {
				return nil, fmt.Errorf("template %s: sandbox %s runs from it; remove the sandbox first: %w", t.Ref, sb.ID, ErrInvalid)
			}
		}
	}
	var removed []string
	for _, t := range todo {
		r.removeImage(ctx, t.Image)
		dir := filepath.Join(r.templatesDir(), t.Name)
		tag := "v" + strconv.Itoa(t.Version)
		if err := os.Remove(filepath.Join(dir, tag+".json")); err != nil {
			return removed, fmt.Errorf("template %s: %w", t.Ref, err)
		}
		os.Remove(filepath.Join(dir, tag+".log"))
		removed = append(removed, t.Ref)
	}
	os.Remove(filepath.Join(r.templatesDir(), name)) // only if empty
	return removed, nil
}

// BuildLog returns the build log of a template version.
func (r *Runner) BuildLog(ref string) ([]byte, error) {
	t, err := r.Template(ref)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(r.templatesDir(), t.Name, t.BuildLog))
}

type imageRemover interface {
	RemoveImage(ctx context.Context, ref string) error
}

func (r *Runner) removeImage(ctx context.Context, ref string) {
	if ir, ok := r.cfg.Engine.(imageRemover); ok {
		if err := ir.RemoveImage(context.WithoutCancel(ctx), ref); err != nil && !errors.Is(err, ErrNotFound) {
			r.log.Warn("template: remove image", "image", ref, "err", err)
		}
	}
}
