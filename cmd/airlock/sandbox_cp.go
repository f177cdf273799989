package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"airlock/client"
	"airlock/internal/tardir"
)

func sandboxCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files into or out of a sandbox (ID:/path names the sandbox side)",
		Long: `Copy a file or a directory into or out of a sandbox, with podman cp's
semantics. The sandbox side is written ID:/absolute/path.

  a file onto a path that does not exist   written at that path (its parent must exist)
  a file onto a file                        overwrites it
  a file onto a directory                   copied into it under its own name
  a directory onto a path that does not exist  created there with the directory's contents
  a directory onto a directory              copied into it under its own name
                                            (SRC ending in "/." copies only the contents)
  a directory onto a file                   an error`,
		Example: `  airlock sandbox cp ./f.py 3f2a9c1b7e4d:/workspace/f.py
  airlock sandbox cp ./src 3f2a9c1b7e4d:/workspace/
  airlock sandbox cp 3f2a9c1b7e4d:/workspace/out.txt ./results/`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c := apiClient()
			if id, dst, ok := splitRemote(args[1]); ok {
				if _, _, both := splitRemote(args[0]); both {
					return errors.New("cp: copy between two sandboxes is not supported; copy through the host")
				}
				return copyIn(ctx, c, args[0], id, dst)
			}
			id, src, ok := splitRemote(args[0])
			if !ok {
				return fmt.Errorf("cp: one side must be a sandbox path ID:/path (got %q and %q)", args[0], args[1])
			}
			return copyOut(ctx, c, id, src, args[1])
		},
	}
}

// kind is what a path is: nothing, a directory, or something else.
type kind int

const (
	kindNone kind = iota
	kindDir
	kindFile
)

// copyPlan is where a copy lands: the directory the archive is unpacked
// into and the name its top entry gets there ("" keeps only the contents).
type copyPlan struct{ dir, top string }

// planCopy applies podman cp's rules. dst is the destination as the user
// wrote it (a trailing "/" says it must be a directory); dstKind and
// parentKind are what dst and its parent are.
func planCopy(srcBase string, srcDir, contents bool, dst string, dstKind, parentKind kind) (copyPlan, error) {
	clean := path.Clean(dst)
	switch dstKind {
	case kindDir:
		if contents {
			return copyPlan{dir: clean}, nil
		}
		return copyPlan{dir: clean, top: srcBase}, nil
	case kindFile:
		if srcDir {
			return copyPlan{}, fmt.Errorf("cannot copy a directory onto the file %s", dst)
		}
		if strings.HasSuffix(dst, "/") {
			return copyPlan{}, fmt.Errorf("%s is not a directory", dst)
		}
	default:
		if strings.HasSuffix(dst, "/") && !srcDir {
			return copyPlan{}, fmt.Errorf("directory %s does not exist", dst)
		}
		if parentKind != kindDir {
			return copyPlan{}, fmt.Errorf("directory %s does not exist", path.Dir(clean))
		}
	}
	return copyPlan{dir: path.Dir(clean), top: path.Base(clean)}, nil
}

func copyIn(ctx context.Context, c *client.Client, src, id, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	contents := fi.IsDir() && (strings.HasSuffix(src, "/.") || src == ".")
	dstKind, err := remoteKind(ctx, c, id, dst)
	if err != nil {
		return err
	}
	parentKind := kindDir
	if dstKind == kindNone {
		if parentKind, err = remoteKind(ctx, c, id, path.Dir(path.Clean(dst))); err != nil {
			return err
		}
	}
	plan, err := planCopy(filepath.Base(filepath.Clean(src)), fi.IsDir(), contents, dst, dstKind, parentKind)
	if err != nil {
		return fmt.Errorf("cp: %s:%s", id, err)
	}
	pr, pw := io.Pipe()
	go func() {
		err := tardir.Write(pw, src, plan.top)
		if err != nil {
			err = fmt.Errorf("cp: %w", err)
		}
		pw.CloseWithError(err)
	}()
	err = c.CopyIn(ctx, id, plan.dir, pr)
	pr.CloseWithError(err)
	return err
}

// remoteKind finds out what p is in the sandbox from the first entry of
// its archive (the rest is not read).
func remoteKind(ctx context.Context, c *client.Client, id, p string) (kind, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := c.CopyOut(ctx, id, path.Clean(p), pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	hdr, herr := tar.NewReader(pr).Next()
	pr.Close()
	cancel()
	err := <-errc
	switch {
	case herr == nil && hdr.Typeflag == tar.TypeDir:
		return kindDir, nil
	case herr == nil:
		return kindFile, nil
	case client.IsCode(err, client.CodeNotFound):
		return kindNone, nil
	case err != nil:
		return kindNone, fmt.Errorf("cp: %s:%s: %w", id, p, err)
	}
	return kindNone, fmt.Errorf("cp: %s:%s: read archive: %w", id, p, herr)
}

func localKind(p string) (kind, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kindNone, nil
	case err != nil:
		return kindNone, fmt.Errorf("cp: %w", err)
	case fi.IsDir():
		return kindDir, nil
	}
	return kindFile, nil
}

func copyOut(ctx context.Context, c *client.Client, id, src, dst string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- extractTo(pr, src, dst) }()
	err := c.CopyOut(ctx, id, src, pw)
	pw.CloseWithError(err)
	if xerr := <-errc; err == nil {
		err = xerr
	}
	pr.Close()
	return err
}

// extractTo unpacks the archive of the sandbox path src at dst on the
// host, by planCopy's rules once its first entry says what src is.
func extractTo(r io.Reader, src, dst string) error {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("cp: %s: empty archive", src)
	}
	if err != nil {
		return fmt.Errorf("cp: read archive: %w", err)
	}
	srcDir := first.Typeflag == tar.TypeDir
	contents := srcDir && strings.HasSuffix(src, "/.")
	dstKind, err := localKind(dst)
	if err != nil {
		return err
	}
	parentKind := kindDir
	if dstKind == kindNone {
		if parentKind, err = localKind(filepath.Dir(filepath.Clean(dst))); err != nil {
			return err
		}
	}
	from := strings.SplitN(strings.TrimPrefix(path.Clean(first.Name), "./"), "/", 2)[0]
	plan, err := planCopy(from, srcDir, contents, filepath.ToSlash(dst), dstKind, parentKind)
	if err != nil {
		return fmt.Errorf("cp: %s", err)
	}
	return extractTar(tr, first, filepath.FromSlash(plan.dir), func(name string) (string, bool) {
		return renameTop(name, from, plan.top)
	})
}

// renameTop gives the archive entry name (top or top/...) the top name to;
// to "" keeps only what is below top.
func renameTop(name, top, to string) (string, bool) {
	name = strings.TrimPrefix(path.Clean(name), "./")
	rest, below := strings.CutPrefix(name, top+"/")
	if !below && name != top {
		return "", false
	}
	switch {
	case to == "" && !below:
		return "", false // the top directory itself: dst is it
	case to == "":
		return rest, true
	case !below:
		return to, true
	}
	return to + "/" + rest, true
}

// extractTar unpacks a tar stream (whose first header, already read, is
// first) under dir, each entry under the name rename gives it (false:
// skipped), refusing entries that would land outside dir (absolute names,
// "..", links pointing out).
func extractTar(tr *tar.Reader, first *tar.Header, dir string, rename func(string) (string, bool)) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer root.Close()
	for hdr := first; ; {
		if name, ok := rename(hdr.Name); ok {
			orig := hdr.Name
			hdr.Name = name
			if err := extractOne(root, tr, hdr); err != nil {
				return fmt.Errorf("cp: %s: %w", orig, err)
			}
		}
		if hdr, err = tr.Next(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("cp: read archive: %w", err)
		}
	}
}

func extractOne(root *os.Root, r io.Reader, hdr *tar.Header) error {
	name := filepath.Clean(filepath.FromSlash(hdr.Name))
	if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
		return errors.New("entry outside the destination; refused")
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o755); err != nil {
			return err
		}
		return root.Chmod(name, mode|0o700)
	case tar.TypeReg:
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode|0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		return errors.Join(err, f.Close())
	case tar.TypeSymlink:
		return root.Symlink(hdr.Linkname, name)
	}
	return nil // devices, fifos, hard links: skipped
}
