package runner

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"airlock/internal/agentwire"
	"airlock/internal/tardir"
)

// plainTree reports whether dir holds only directories and regular files:
// what the agent's files API copies into a claimed member (a symlink or a
// special file sends the create the cold way, where the engine copies it).
func plainTree(dir string) bool {
	ok := true
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			ok = false
			return fs.SkipAll
		}
		return nil
	})
	return ok && err == nil
}

// copyInAgent copies a host directory into /workspace through the agent,
// file by file (no engine call). Files are opened through an os.Root, never
// following a link out of dir.
func (r *Runner) copyInAgent(ctx context.Context, a Agent, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		return r.copyEntry(ctx, a, root, rel, d)
	})
}

func (r *Runner) copyEntry(ctx context.Context, a Agent, root *os.Root, rel string, d fs.DirEntry) error {
	dst := path.Join(WorkspaceDir, filepath.ToSlash(rel))
	fi, err := d.Info()
	if err != nil {
		return err
	}
	perm := uint32(fi.Mode().Perm())
	switch {
	case fi.IsDir():
		if _, err := a.Do(ctx, agentwire.Request{Op: agentwire.OpMkdir, Path: dst, Parents: true, Mode: perm}); err != nil {
			return fmt.Errorf("copy workspace in: mkdir %s: %w", dst, agentErr(err))
		}
		return nil
	case !fi.Mode().IsRegular():
		return fmt.Errorf("copy workspace in: %s is not a regular file or directory: %w", rel, ErrUnsupported)
	}
	f, st, err := tardir.OpenRegular(root, rel)
	if err != nil {
		return fmt.Errorf("copy workspace in: %w", err)
	}
	defer f.Close()
	if _, err := a.WriteFile(ctx, dst, perm, st.Size(), max(r.maxFile(), st.Size()), f); err != nil {
		return fmt.Errorf("copy workspace in: %s: %w", dst, agentErr(err))
	}
	return nil
}
