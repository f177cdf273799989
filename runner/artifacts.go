package runner

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/internal/tardir"
)

// ArtifactConfig bounds what is kept of a sandbox after it ends. Zero
// fields take the defaults below.
type ArtifactConfig struct {
	// MaxFileBytes bounds one changed file or one declared output.
	MaxFileBytes int64
	// MaxSandboxBytes bounds all artifacts of one sandbox.
	MaxSandboxBytes int64
	// MaxAge: artifacts of sandboxes that ended longer ago are removed.
	MaxAge time.Duration
	// MaxTotalBytes bounds the artifacts of all sandboxes; the oldest go
	// first.
	MaxTotalBytes int64
	// MaxWorkspaceBytes bounds the copy of /workspace the export diffs (a
	// tar stream in the artifact directory while it runs): over it, no
	// diff is kept and the manifest says why.
	MaxWorkspaceBytes int64
	// MaxCommandsBytes bounds a sandbox's commands.jsonl: records past it
	// are kept in the audit store only, and the manifest says so.
	MaxCommandsBytes int64
}

// Artifact defaults.
const (
	DefaultArtifactFileBytes    = 16 << 20
	DefaultArtifactSandboxBytes = 256 << 20
	DefaultArtifactMaxAge       = 7 * 24 * time.Hour
	DefaultArtifactTotalBytes   = 4 << 30
	DefaultWorkspaceExportBytes = 1 << 30
	DefaultCommandsBytes        = 64 << 20
)

// Artifact kinds (ArtifactFile.Kind).
const (
	ArtifactPatch    = "patch"    // diff.patch: the workspace's unified diff
	ArtifactChanges  = "changes"  // changes.json: the changed paths
	ArtifactFileKind = "file"     // files/PATH: a changed workspace file
	ArtifactOutput   = "output"   // outputs/N-NAME.tar: a declared output path
	ArtifactCommands = "commands" // commands.jsonl: the sandbox's exec records
	ArtifactReport   = "report"   // report.md: the review report
	ArtifactShell    = "shell"    // shells/EXEC.jsonl: a recorded shell session
	ArtifactOther    = "other"
)

// ArtifactFile is one exported file.
type ArtifactFile struct {
	Name   string `json:"name"` // relative to the sandbox's artifact directory
	Kind   string `json:"kind"`
	Path   string `json:"path,omitempty"` // where it was in the sandbox
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Artifacts is the manifest of what a sandbox left when it ended.
type Artifacts struct {
	Sandbox Sandbox        `json:"sandbox"`
	Reason  string         `json:"reason"`
	Ended   time.Time      `json:"ended"`
	Dir     string         `json:"dir"`
	Bytes   int64          `json:"bytes"`
	Files   []ArtifactFile `json:"files"`
	Changes []Change       `json:"changes,omitempty"`
	// Skipped says what was not kept and why (a bound, a missing path).
	Skipped []string `json:"skipped,omitempty"`
	// Errors are steps of the export that failed; the rest was kept.
	Errors []string `json:"errors,omitempty"`
}

// ArtifactHook writes more artifacts (the review report) into dir for a
// sandbox that is ending, before the manifest is written.
type ArtifactHook func(ctx context.Context, sb Sandbox, dir string) error

const manifestName = "manifest.json"

func (r *Runner) artifactsDir() string { return r.cfg.ArtifactDir }
func (r *Runner) commandsPath(id string) string {
	return filepath.Join(r.sandboxesDir(), id, "commands.jsonl")
}

func (c ArtifactConfig) withDefaults() ArtifactConfig {
	c.MaxFileBytes = cmpOr(c.MaxFileBytes, DefaultArtifactFileBytes)
	c.MaxSandboxBytes = cmpOr(c.MaxSandboxBytes, DefaultArtifactSandboxBytes)
	c.MaxAge = cmpOr(c.MaxAge, DefaultArtifactMaxAge)
	c.MaxTotalBytes = cmpOr(c.MaxTotalBytes, DefaultArtifactTotalBytes)
	c.MaxWorkspaceBytes = cmpOr(c.MaxWorkspaceBytes, DefaultWorkspaceExportBytes)
	c.MaxCommandsBytes = cmpOr(c.MaxCommandsBytes, DefaultCommandsBytes)
	return c
}

// exporter collects one sandbox's artifacts in a temporary directory.
type exporter struct {
	r      *Runner
	sb     Sandbox
	dir    string
	budget int64
	art    Artifacts
	paths  map[string]string // artifact name -> sandbox path
}

// export writes a sandbox's artifacts under StateDir/artifacts/<id>/ before
// it is removed: the workspace diff and changed files, the declared
// outputs, the command records and what the hook adds. A step that fails is
// noted in the manifest; the others still run. The directory appears whole
// (renamed into place) or not at all.
func (r *Runner) export(ctx context.Context, sb Sandbox, reason string) Artifacts {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cfg := r.cfg.Artifacts
	final := filepath.Join(r.artifactsDir(), sb.ID)
	x := &exporter{r: r, sb: sb, dir: final + ".tmp", budget: cfg.MaxSandboxBytes, paths: map[string]string{},
		art: Artifacts{Sandbox: sb, Reason: reason, Ended: r.cfg.Now().UTC(), Dir: final}}
	os.RemoveAll(x.dir)
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		x.art.Errors = append(x.art.Errors, fmt.Sprintf("artifact directory: %v", err))
		return x.art
	}
	x.step("workspace diff", x.workspace(ctx))
	x.step("outputs", x.outputs(ctx))
	x.step("command records", x.commands())
	x.step("shell records", x.shells())
	if r.cfg.ArtifactHook != nil {
		x.step("report", r.cfg.ArtifactHook(ctx, sb, x.dir))
	}
	x.step("manifest", x.finish(final))
	r.pruneArtifacts(sb.ID)
	return x.art
}

func (x *exporter) step(what string, err error) {
	if err != nil {
		x.art.Errors = append(x.art.Errors, what+": "+err.Error())
		x.r.log.Warn("sandbox artifacts: "+what, "sandbox", x.sb.ID, "err", err)
	}
}

// workspace diffs /workspace against the baseline and keeps the patch and
// the changed files within the bounds.
func (x *exporter) workspace(ctx context.Context) error {
	cur, err := os.CreateTemp(x.dir, ".workspace-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(cur.Name())
	defer cur.Close()
	limit := x.r.cfg.Artifacts.MaxWorkspaceBytes
	bw := &boundedWriter{w: cur, left: limit}
	if err := x.readWorkspace(ctx, bw); err != nil {
		if bw.over {
			return fmt.Errorf("/workspace is over the %d-byte bound of its export copy (artifacts.max_workspace_mb): no diff or changed files kept", limit)
		}
		return fmt.Errorf("read /workspace: %w", err)
	}
	old := map[string]entry{}
	if base, err := os.Open(x.r.baselinePath(x.sb.ID)); err == nil {
		old, err = indexTar(base)
		base.Close()
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	} else {
		x.art.Skipped = append(x.art.Skipped, "no workspace baseline: every file is shown as added")
	}
	if _, err := cur.Seek(0, io.SeekStart); err != nil {
		return err
	}
	now, err := indexTar(cur)
	if err != nil {
		return fmt.Errorf("read /workspace: %w", err)
	}
	d := diffTrees(old, now)
	x.art.Changes = d.Changes
	if d.Patch != "" {
		if err := x.write("diff.patch", []byte(d.Patch)); err != nil {
			return err
		}
	}
	b, _ := json.MarshalIndent(d.Changes, "", "  ")
	if err := x.write("changes.json", append(b, '\n')); err != nil {
		return err
	}
	if _, err := cur.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return x.changedFiles(cur, d.Changes)
}

func (x *exporter) readWorkspace(ctx context.Context, w io.Writer) error {
	if ws := x.sb.Workspace; ws.HostDir != "" && ws.Mode == WorkspaceBind {
		return tardir.Write(w, ws.HostDir, "")
	}
	if x.sb.ContainerID == "" {
		return errors.New("no container")
	}
	return x.r.cfg.Engine.CopyOut(ctx, x.sb.ContainerID, WorkspaceDir, w)
}

// changedFiles copies each added or modified regular file to files/PATH.
func (x *exporter) changedFiles(rd io.Reader, changes []Change) error {
	want := map[string]bool{}
	for _, c := range changes {
		if c.Kind != "deleted" {
			want[c.Path] = true
		}
	}
	tr := tar.NewReader(rd)
	for len(want) > 0 {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := relName(h.Name)
		if !want[name] || h.Typeflag != tar.TypeReg {
			continue
		}
		delete(want, name)
		if err := x.copyBounded(path.Join("files", name), h.Size, tr); err != nil {
			return err
		}
		x.paths[path.Join("files", name)] = path.Join(WorkspaceDir, name)
	}
	return nil
}

// copyBounded writes size bytes from rd to name, or notes why not.
func (x *exporter) copyBounded(name string, size int64, rd io.Reader) error {
	return x.copyWithin(name, size, rd, x.r.cfg.Artifacts.MaxFileBytes)
}

// copyWithin is copyBounded with a per-file bound of its own (the
// records: only the per-sandbox bound).
func (x *exporter) copyWithin(name string, size int64, rd io.Reader, maxFile int64) error {
	cfg := x.r.cfg.Artifacts
	cfg.MaxFileBytes = maxFile
	switch {
	case size > cfg.MaxFileBytes:
		x.art.Skipped = append(x.art.Skipped, fmt.Sprintf("%s: %d bytes, over the %d-byte bound per file", name, size, cfg.MaxFileBytes))
		return nil
	case size > x.budget:
		x.art.Skipped = append(x.art.Skipped, fmt.Sprintf("%s: %d bytes, over the %d bytes left of the per-sandbox bound", name, size, x.budget))
		return nil
	}
	dst := filepath.Join(x.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(rd, size))
	x.budget -= n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (x *exporter) write(name string, b []byte) error {
	return x.copyWithin(name, int64(len(b)), strings.NewReader(string(b)), x.budget)
}

// outputs copies each declared output path as a tar stream, within the
// bounds; a path that is absent is noted.
func (x *exporter) outputs(ctx context.Context) error {
	var errs []error
	for i, p := range x.sb.Outputs {
		name := fmt.Sprintf("outputs/%d-%s.tar", i+1, outputSlug(p))
		if err := x.output(ctx, name, p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func (x *exporter) output(ctx context.Context, name, p string) error {
	if x.sb.ContainerID == "" {
		return errors.New("no container to copy from")
	}
	dst := filepath.Join(x.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	limit := min(x.r.cfg.Artifacts.MaxFileBytes, x.budget)
	w := &boundedWriter{w: f, left: limit}
	err = x.r.cfg.Engine.CopyOut(ctx, x.sb.ContainerID, p, w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case w.over:
		os.Remove(dst)
		x.art.Skipped = append(x.art.Skipped, fmt.Sprintf("%s (%s): over the %d-byte bound", name, p, limit))
		return nil
	case errors.Is(err, ErrNotFound):
		os.Remove(dst)
		x.art.Skipped = append(x.art.Skipped, fmt.Sprintf("output %s: not found in the sandbox", p))
		return nil
	case err != nil:
		os.Remove(dst)
		return err
	}
	x.budget -= limit - w.left
	x.paths[name] = p
	return nil
}

// outputSlug makes a file name of a sandbox path: /a/b c -> a_b_c.
func outputSlug(p string) string {
	s := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			return c
		}
		return '_'
	}, strings.Trim(p, "/"))
	if len(s) > 64 {
		s = s[:64]
	}
	if s == "" || strings.Trim(s, ".") == "" {
		s = "root"
	}
	return s
}

type boundedWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		b.over = true
		return 0, errors.New("over the artifact bound")
	}
	n, err := b.w.Write(p)
	b.left -= int64(n)
	return n, err
}

// commands copies the sandbox's exec records.
func (x *exporter) commands() error {
	f, err := os.Open(x.r.commandsPath(x.sb.ID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := os.Stat(x.r.commandsPath(x.sb.ID) + cutSuffix); err == nil {
		x.art.Skipped = append(x.art.Skipped, fmt.Sprintf("commands.jsonl: cut at its bound of %d bytes (artifacts.max_commands_mb); "+
			"the later exec records are in the audit store only", x.r.cfg.Artifacts.MaxCommandsBytes))
	}
	return x.copyWithin("commands.jsonl", fi.Size(), f, x.budget)
}

// finish lists the files, writes the manifest and renames the directory
// into place.
func (x *exporter) finish(final string) error {
	err := filepath.WalkDir(x.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(x.dir, p)
		if filepath.Dir(rel) == "." && strings.HasPrefix(rel, ".workspace-") {
			return nil // the exporter's own temporary
		}
		name := filepath.ToSlash(rel)
		af, err := describeFile(p, name)
		if err != nil {
			return err
		}
		af.Path = x.paths[name]
		x.art.Files = append(x.art.Files, af)
		x.art.Bytes += af.Size
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(x.art.Files, func(i, j int) bool { return x.art.Files[i].Name < x.art.Files[j].Name })
	b, err := json.MarshalIndent(x.art, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(x.dir, manifestName), append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(x.dir, final)
}

func describeFile(p, name string) (ArtifactFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return ArtifactFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return ArtifactFile{}, err
	}
	return ArtifactFile{Name: name, Kind: artifactKind(name), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func artifactKind(name string) string {
	switch {
	case name == "diff.patch":
		return ArtifactPatch
	case name == "changes.json":
		return ArtifactChanges
	case name == "commands.jsonl":
		return ArtifactCommands
	case strings.HasPrefix(name, "report."):
		return ArtifactReport
	case strings.HasPrefix(name, "files/"):
		return ArtifactFileKind
	case strings.HasPrefix(name, "outputs/"):
		return ArtifactOutput
	case strings.HasPrefix(name, "shells/"):
		return ArtifactShell
	}
	return ArtifactOther
}

// Artifacts returns the manifest of what sandbox id left when it ended.
func (r *Runner) Artifacts(id string) (Artifacts, error) {
	if !validID(id) {
		return Artifacts{}, fmt.Errorf("artifacts: bad sandbox id %q: %w", id, ErrInvalid)
	}
	b, err := os.ReadFile(filepath.Join(r.artifactsDir(), id, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return Artifacts{}, fmt.Errorf("artifacts of sandbox %q (none kept: it has not ended, or they were pruned): %w", id, ErrNotFound)
	}
	if err != nil {
		return Artifacts{}, fmt.Errorf("artifacts of %s: %w", id, err)
	}
	var a Artifacts
	if err := json.Unmarshal(b, &a); err != nil {
		return Artifacts{}, fmt.Errorf("artifacts of %s: manifest: %w", id, err)
	}
	return a, nil
}

// OpenArtifact opens one file the manifest of sandbox id lists. Only names
// in the manifest are served.
func (r *Runner) OpenArtifact(id, name string) (*os.File, ArtifactFile, error) {
	a, err := r.Artifacts(id)
	if err != nil {
		return nil, ArtifactFile{}, err
	}
	i := slices.IndexFunc(a.Files, func(f ArtifactFile) bool { return f.Name == name })
	if i < 0 {
		return nil, ArtifactFile{}, fmt.Errorf("sandbox %s has no artifact %q (see the list): %w", id, name, ErrNotFound)
	}
	f, err := os.Open(filepath.Join(r.artifactsDir(), id, filepath.FromSlash(a.Files[i].Name)))
	if err != nil {
		return nil, ArtifactFile{}, fmt.Errorf("artifact %s of %s: %w", name, id, err)
	}
	return f, a.Files[i], nil
}

func validID(id string) bool {
	return id != "" && len(id) <= 64 && strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyz-") == ""
}

// pruneArtifacts removes artifacts older than MaxAge, then the oldest until
// all fit MaxTotalBytes; keep is never removed. Half-written exports of an
// earlier process are removed.
func (r *Runner) pruneArtifacts(keep string) {
	cfg := r.cfg.Artifacts
	ents, err := os.ReadDir(r.artifactsDir())
	if err != nil {
		return
	}
	type kept struct {
		id    string
		ended time.Time
		bytes int64
	}
	var all []kept
	var total int64
	for _, e := range ents {
		id := e.Name()
		if strings.HasSuffix(id, ".tmp") && id != keep+".tmp" {
			os.RemoveAll(filepath.Join(r.artifactsDir(), id))
			continue
		}
		a, err := r.Artifacts(id)
		if err != nil {
			continue
		}
		if id != keep && r.cfg.Now().Sub(a.Ended) > cfg.MaxAge {
			r.removeArtifacts(id, "older than "+cfg.MaxAge.String())
			continue
		}
		all = append(all, kept{id, a.Ended, a.Bytes})
		total += a.Bytes
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ended.Before(all[j].ended) })
	for _, k := range all {
		if total <= cfg.MaxTotalBytes {
			break
		}
		if k.id == keep {
			continue
		}
		r.removeArtifacts(k.id, "over the "+strconv.FormatInt(cfg.MaxTotalBytes, 10)+"-byte total bound")
		total -= k.bytes
	}
}

func (r *Runner) removeArtifacts(id, why string) {
	if err := os.RemoveAll(filepath.Join(r.artifactsDir(), id)); err != nil {
		r.log.Warn("sandbox artifacts: prune", "sandbox", id, "err", err)
		return
	}
	r.log.Info("sandbox artifacts pruned", "sandbox", id, "reason", why)
}

// artifactSummary is the lifecycle detail for an export.
func artifactSummary(a Artifacts) string {
	s := fmt.Sprintf("artifacts: %d files, %d bytes in %s", len(a.Files), a.Bytes, a.Dir)
	if len(a.Skipped) > 0 {
		s += fmt.Sprintf("; %d skipped", len(a.Skipped))
	}
	if len(a.Errors) > 0 {
		s += "; errors: " + strings.Join(a.Errors, "; ")
	}
	return s
}

// MaxOutputs bounds the declared output paths of one sandbox.
const MaxOutputs = 32

func validOutputs(ps []string) error {
	if len(ps) > MaxOutputs {
		return fmt.Errorf("%d output paths, at most %d: %w", len(ps), MaxOutputs, ErrInvalid)
	}
	for i, p := range ps {
		switch {
		case !strings.HasPrefix(p, "/"):
			return fmt.Errorf("output %d %q: must be an absolute path in the sandbox: %w", i+1, p, ErrInvalid)
		case path.Clean(p) != p || strings.ContainsRune(p, 0):
			return fmt.Errorf("output %d %q: not a clean path (want %q): %w", i+1, p, path.Clean(p), ErrInvalid)
		case len(p) > 4096:
			return fmt.Errorf("output %d: path longer than 4096 bytes: %w", i+1, ErrInvalid)
		}
	}
	return nil
}

// parseOutputs reads the outputs label.
func parseOutputs(label string) []string {
	var ps []string
	if label == "" || json.Unmarshal([]byte(label), &ps) != nil || validOutputs(ps) != nil {
		return nil
	}
	return ps
}
