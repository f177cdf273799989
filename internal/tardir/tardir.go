// Package tardir writes a host file or directory tree as a tar stream: the
// one writer behind a sandbox's workspace copy and baseline (runner) and
// `airlock sandbox cp` (cmd/airlock). It imports nothing of the appliance,
// so the thin CLI can link it.
package tardir

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// Write writes src, a directory tree or a single file, as a tar stream
// whose top entry is named top; top "" leaves it out and names what is
// below it relative to it (a directory's contents). Regular files,
// directories and symbolic links (never followed) go in; other files are
// skipped. Owners are left out (the extracting side's user owns them).
// Files are opened under src's directory (os.Root), so a tree that is
// swapped for a symbolic link while it is read never leads outside it.
func Write(w io.Writer, src, top string) error {
	src = filepath.Clean(src)
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if !fi.IsDir() {
		root, err := os.OpenRoot(filepath.Dir(src))
		if err != nil {
			return err
		}
		defer root.Close()
		if top == "" {
			top = filepath.Base(src)
		}
		if err := entry(tw, root, src, filepath.Base(src), top, fi); err != nil {
			return err
		}
		return tw.Close()
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(top, filepath.ToSlash(rel))
		if rel == "." && top == "" {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return entry(tw, root, p, rel, name, fi)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// entry writes one file: p is its host path, rel its path under root.
func entry(tw *tar.Writer, root *os.Root, p, rel, name string, fi fs.FileInfo) error {
	link := ""
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		var err error
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case !fi.Mode().IsRegular() && !fi.IsDir():
		return nil
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = name
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, _, err := OpenRegular(root, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, h.Size)
	return err
}

// OpenRegular opens rel under root for reading, never through a symbolic
// link (nor a FIFO that would block), and only if it is still a regular
// file: what a walk saw may have been swapped since.
func OpenRegular(root *os.Root, rel string) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s changed while read (now %v)", rel, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}
