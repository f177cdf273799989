package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func sandboxCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files into or out of a sandbox (ID:/path names the sandbox side)",
		Long: `Copy a host file or directory into a sandbox directory, or a sandbox path
out into a host directory. The sandbox side is written ID:/absolute/path.`,
		Example: `  airlock sandbox cp ./src 3f2a9c1b7e4d:/workspace/
  airlock sandbox cp 3f2a9c1b7e4d:/workspace/out.txt ./results/`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c := apiClient()
			if id, dir, ok := splitRemote(args[1]); ok {
				if _, _, both := splitRemote(args[0]); both {
					return errors.New("cp: copy between two sandboxes is not supported; copy through the host")
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(writeTar(pw, args[0])) }()
				err := c.CopyIn(ctx, id, dir, pr)
				pr.CloseWithError(err)
				return err
			}
			id, path, ok := splitRemote(args[0])
			if !ok {
				return fmt.Errorf("cp: one side must be a sandbox path ID:/path (got %q and %q)", args[0], args[1])
			}
			pr, pw := io.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- extractTar(pr, args[1]) }()
			err := c.CopyOut(ctx, id, path, pw)
			pw.CloseWithError(err)
			if xerr := <-errc; err == nil {
				err = xerr
			}
			return err
		},
	}
}

// writeTar writes src (a file or a directory tree) as a tar stream whose
// top entry is src's base name.
func writeTar(w io.Writer, src string) error {
	tw := tar.NewWriter(w)
	base := filepath.Dir(filepath.Clean(src))
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return tw.Close()
}

// extractTar unpacks a tar stream under dir, refusing entries that would
// land outside it (absolute names, "..", links pointing out).
func extractTar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cp: read archive: %w", err)
		}
		if err := extractOne(root, tr, hdr); err != nil {
			return fmt.Errorf("cp: %s: %w", hdr.Name, err)
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
