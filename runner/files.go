package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"airlock/audit"
)

// CopyIn extracts a tar stream into dir (absolute) in the sandbox.
func (r *Runner) CopyIn(ctx context.Context, id, dir string, tar io.Reader) error {
	sb, err := r.running(id)
	if err != nil {
		return fmt.Errorf("copy in: %w", err)
	}
	if err := checkSandboxPath(dir); err != nil {
		return fmt.Errorf("copy into %s: %w", id, err)
	}
	if sb.ReadOnly && !writableWhenRO(dir) {
		return fmt.Errorf("copy into %s:%s: the sandbox's root filesystem is read-only; writable: %s: %w",
			id, dir, strings.Join(append([]string{WorkspaceDir}, writableWhenReadOnly...), ", "), ErrInvalid)
	}
	if err := r.cfg.Engine.CopyIn(ctx, sb.ContainerID, path.Clean(dir), tar); err != nil {
		return fmt.Errorf("copy into %s:%s: %w", id, dir, err)
	}
	r.filesChanged(ctx, sb, audit.FileChange{Path: path.Clean(dir), Op: "written"})
	return nil
}

// CopyOut writes path (absolute) from the sandbox to w as a tar stream.
func (r *Runner) CopyOut(ctx context.Context, id, p string, w io.Writer) error {
	sb, err := r.running(id)
	if err != nil {
		return fmt.Errorf("copy out: %w", err)
	}
	if err := checkSandboxPath(p); err != nil {
		return fmt.Errorf("copy out of %s: %w", id, err)
	}
	if err := r.cfg.Engine.CopyOut(ctx, sb.ContainerID, path.Clean(p), w); err != nil {
		return fmt.Errorf("copy out of %s:%s: %w", id, p, err)
	}
	return nil
}

func checkSandboxPath(p string) error {
	if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q must be absolute: %w", p, ErrInvalid)
	}
	return nil
}

func writableWhenRO(p string) bool {
	p = path.Clean(p)
	for _, w := range append([]string{WorkspaceDir}, writableWhenReadOnly...) {
		if p == w || strings.HasPrefix(p, w+"/") {
			return true
		}
	}
	return false
}

// SnapshotRepo is the local image repository snapshots are committed to,
// tagged with the sandbox id.
const SnapshotRepo = "localhost/airlock/snapshot"

// Snapshot commits the sandbox's filesystem to SnapshotRepo:<id>. The
// sandbox keeps running. The image holds everything written in the sandbox:
// the result carries a warning to pass on.
func (r *Runner) Snapshot(ctx context.Context, id string) (Snapshot, error) {
	sb, err := r.running(id)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	imageID, err := r.cfg.Engine.Commit(ctx, sb.ContainerID, SnapshotRepo, id)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	s := Snapshot{Image: SnapshotRepo + ":" + id, ImageID: imageID, Warning: SnapshotWarning}
	r.log.Warn("sandbox snapshot written", "sandbox", id, "image", s.Image, "warning", s.Warning)
	r.lifecycleBy(ctx, sb, "snapshot", s.Image+": "+s.Warning)
	return s, nil
}

// Diff compares /workspace now with the baseline recorded when the sandbox
// was created (after its setup commands).
func (r *Runner) Diff(ctx context.Context, id string) (Diff, error) {
	sb, err := r.running(id)
	if err != nil {
		return Diff{}, fmt.Errorf("diff: %w", err)
	}
	base, err := os.Open(r.baselinePath(id))
	if err != nil {
		return Diff{}, fmt.Errorf("diff of %s: no workspace baseline: %w", id, err)
	}
	defer base.Close()
	old, err := indexTar(base)
	if err != nil {
		return Diff{}, fmt.Errorf("diff of %s: baseline: %w", id, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(r.cfg.Engine.CopyOut(ctx, sb.ContainerID, WorkspaceDir, pw)) }()
	cur, err := indexTar(pr)
	pr.CloseWithError(err)
	if err != nil {
		return Diff{}, fmt.Errorf("diff of %s: read /workspace: %w", id, err)
	}
	return diffTrees(old, cur), nil
}
