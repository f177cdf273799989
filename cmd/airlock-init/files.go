package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

// Files: every path is resolved by openat2 with RESOLVE_IN_ROOT from the
// sandbox's "/": "..", absolute symlinks and magic links cannot leave the
// sandbox's tree (the agent never sees the host's anyway), and nothing
// under procfs, sysfs or the other kernel file systems is served.

var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "procfs", unix.SYSFS_MAGIC: "sysfs", unix.CGROUP_SUPER_MAGIC: "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs", unix.SECURITYFS_MAGIC: "securityfs",
	unix.BPF_FS_MAGIC: "bpffs", unix.TRACEFS_MAGIC: "tracefs",
}

// resolve opens p inside the sandbox root with flags.
func (a *agent) resolve(p string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: 0,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	var err error
	for {
		fd, err = unix.Openat2(a.root, p, how)
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	if err != nil {
		return -1, pathErr(p, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		unix.Close(fd)
		return -1, errorf(agentwire.CodeInternal, "%s: statfs: %v", p, err)
	}
	if fs, bad := kernelFS[int64(st.Type)]; bad {
		unix.Close(fd)
		return -1, errorf(agentwire.CodeDenied, "%s: is on %s: the files API serves only the sandbox's own files", p, fs)
	}
	return fd, nil
}

func pathErr(p string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return errorf(agentwire.CodeNotFound, "%s: no such file or directory", p)
	case errors.Is(err, unix.EEXIST):
		return errorf(agentwire.CodeExists, "%s: already exists", p)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return errorf(agentwire.CodeDenied, "%s: %v", p, err)
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR), errors.Is(err, unix.ELOOP),
		errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EXDEV):
		return errorf(agentwire.CodeInvalid, "%s: %v", p, err)
	}
	return errorf(agentwire.CodeInternal, "%s: %v", p, err)
}

// parent opens p's directory and returns it with p's last element.
func (a *agent) parent(p string) (int, string, error) {
	p = path.Clean(p)
	dir, base := path.Split(p)
	if base == "" {
		return -1, "", errorf(agentwire.CodeInvalid, "%s: the root has no parent", p)
	}
	fd, err := a.resolve(dir, unix.O_PATH|unix.O_DIRECTORY)
	return fd, base, err
}

func (a *agent) bound(max int64) int64 {
	if max <= 0 {
		max = defaultMax
	}
	return min(max, hardMaxFile)
}

func fileInfo(name string, st *unix.Stat_t) agentwire.FileInfo {
	fi := agentwire.FileInfo{Name: name, Size: st.Size, Mode: st.Mode & 0o7777, ModNS: st.Mtim.Nano(),
		UID: int(st.Uid), GID: int(st.Gid), Type: "other"}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = "file"
	case unix.S_IFDIR:
		fi.Type = "dir"
	case unix.S_IFLNK:
		fi.Type = "symlink"
	}
	return fi
}

// read streams a regular file as data frames.
func (c *conn) read(req *agentwire.Request) bool {
	max := c.a.bound(req.Max)
	// O_NONBLOCK: a FIFO must not hang the read; O_NOCTTY: a terminal
	// must never become PID 1's controlling terminal.
	fd, err := c.a.resolve(req.Path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return c.result(failResult(err)) == nil
	}
	f := os.NewFile(uintptr(fd), req.Path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return c.result(failResult(pathErr(req.Path, err))) == nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return c.result(failResult(errorf(agentwire.CodeInvalid, "%s: not a regular file", req.Path))) == nil
	}
	if st.Size > max {
		return c.result(failResult(errorf(agentwire.CodeTooLarge, "%s: %d bytes, over the limit of %d", req.Path, st.Size, max))) == nil
	}
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, rerr := f.Read(buf)
		if k > 0 {
			n += int64(k)
			if n > max {
				return c.result(failResult(errorf(agentwire.CodeTooLarge, "%s: grew past the limit of %d while read", req.Path, max))) == nil
			}
			if c.send(agentwire.TData, buf[:k]) != nil {
				return false
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return c.result(failResult(pathErr(req.Path, rerr))) == nil
		}
	}
	if c.send(agentwire.TDataEnd, nil) != nil {
		return false
	}
	fi := fileInfo(path.Base(req.Path), &st)
	return c.result(&agentwire.Result{File: &fi, Bytes: n}) == nil
}

// write receives exactly req.Size bytes into a temporary file beside the
// target and renames it over the target.
func (c *conn) write(req *agentwire.Request) bool {
	max := c.a.bound(req.Max)
	var werr error
	if req.Size > max {
		werr = errorf(agentwire.CodeTooLarge, "%s: %d bytes, over the limit of %d", req.Path, req.Size, max)
	}
	dirfd, base, err := -1, "", werr
	if err == nil {
		dirfd, base, err = c.a.parent(req.Path)
	}
	var tmp string
	var f *os.File
	if err == nil {
		defer unix.Close(dirfd)
		tmp = ".airlock-" + base + "-" + randHex()
		if len(tmp) > 255 {
			tmp = ".airlock-" + randHex()
		}
		var fd int
		fd, err = unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			err = pathErr(path.Join(path.Dir(req.Path), tmp), err)
		} else {
			f = os.NewFile(uintptr(fd), tmp)
		}
	}
	var n int64
	for {
		t, b, rerr := c.r.Next()
		if rerr != nil {
			if f != nil {
				f.Close()
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
			return false
		}
		if t == agentwire.TDataEnd {
			break
		}
		if t != agentwire.TData || n+int64(len(b)) > req.Size {
			if f != nil {
				f.Close()
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
			_ = c.result(failResult(errorf(agentwire.CodeInvalid, "write %s: %s frame after %d of %d bytes", req.Path, t, n, req.Size)))
			return false
		}
		n += int64(len(b))
		if f != nil && err == nil {
			if _, e := f.Write(b); e != nil {
				err = pathErr(req.Path, e)
			}
		}
	}
	if err == nil && n != req.Size {
		err = errorf(agentwire.CodeInvalid, "write %s: got %d bytes, the request said %d", req.Path, n, req.Size)
	}
	if f != nil {
		mode := req.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err == nil {
			if e := f.Chmod(os.FileMode(mode&0o777) | modeBits(mode)); e != nil {
				err = pathErr(req.Path, e)
			}
		}
		if e := f.Close(); err == nil && e != nil {
			err = pathErr(req.Path, e)
		}
		if err == nil {
			if e := unix.Renameat(dirfd, tmp, dirfd, base); e != nil {
				err = pathErr(req.Path, e)
			}
		}
		if err != nil {
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}
	if err != nil {
		return c.result(failResult(err)) == nil
	}
	var st unix.Stat_t
	res := &agentwire.Result{Bytes: n}
	if unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		fi := fileInfo(base, &st)
		res.File = &fi
	}
	return c.result(res) == nil
}

func modeBits(m uint32) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (a *agent) stat(req *agentwire.Request) (*agentwire.Result, error) {
	var st unix.Stat_t
	if path.Clean(req.Path) == "/" {
		if err := unix.Fstat(a.root, &st); err != nil {
			return nil, pathErr("/", err)
		}
		fi := fileInfo("/", &st)
		return &agentwire.Result{File: &fi}, nil
	}
	dirfd, base, err := a.parent(req.Path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, pathErr(req.Path, err)
	}
	fi := fileInfo(base, &st)
	if fi.Type == "symlink" {
		fi.Symlink = readlinkat(dirfd, base)
	}
	return &agentwire.Result{File: &fi}, nil
}

func readlinkat(dirfd int, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// list streams a directory's entries in data frames (agentwire.ListChunk
// each): a Result frame holds only about 5,000 of them.
func (c *conn) list(req *agentwire.Request) bool {
	res, err := c.a.list(req)
	if err != nil {
		return c.result(failResult(err)) == nil
	}
	chunks, err := agentwire.ChunkEntries(res.Files)
	if err != nil {
		return c.result(failResult(err)) == nil
	}
	for _, b := range chunks {
		if c.send(agentwire.TData, b) != nil {
			return false
		}
	}
	if c.send(agentwire.TDataEnd, nil) != nil {
		return false
	}
	return c.result(&agentwire.Result{Bytes: int64(len(res.Files))}) == nil
}

func (a *agent) list(req *agentwire.Request) (*agentwire.Result, error) {
	fd, err := a.resolve(req.Path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), req.Path)
	defer d.Close()
	limit := int(min(cmpOr(req.Max, maxListing), maxListing))
	names, err := d.Readdirnames(limit + 1)
	if err != nil && err != io.EOF {
		return nil, pathErr(req.Path, err)
	}
	if len(names) > limit {
		return nil, errorf(agentwire.CodeTooLarge, "%s: more than %d entries", req.Path, limit)
	}
	res := &agentwire.Result{Files: make([]agentwire.FileInfo, 0, len(names))}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone since readdir
		}
		fi := fileInfo(n, &st)
		if fi.Type == "symlink" {
			fi.Symlink = readlinkat(fd, n)
		}
		res.Files = append(res.Files, fi)
	}
	return res, nil
}

func (a *agent) remove(req *agentwire.Request) error {
	dirfd, base, err := a.parent(req.Path)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr(req.Path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return wrapPath(req.Path, unix.Unlinkat(dirfd, base, 0))
	}
	if req.Recursive {
		if err := removeContents(dirfd, base, 0); err != nil {
			return pathErr(req.Path, err)
		}
	}
	return wrapPath(req.Path, unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR))
}

func wrapPath(p string, err error) error {
	if err != nil {
		return pathErr(p, err)
	}
	return nil
}

// removeContents empties directory name under dirfd without following a
// symlink anywhere (O_NOFOLLOW, unlinkat).
func removeContents(dirfd int, name string, depth int) error {
	if depth > 256 {
		return fmt.Errorf("more than 256 levels deep")
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := removeContents(fd, n, depth+1); err != nil {
					return err
				}
				if err := unix.Unlinkat(fd, n, unix.AT_REMOVEDIR); err != nil {
					return err
				}
			} else if err := unix.Unlinkat(fd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (a *agent) mkdir(req *agentwire.Request) error {
	mode := req.Mode
	if mode == 0 {
		mode = 0o755
	}
	clean := path.Clean(req.Path)
	if !req.Parents {
		return a.mkdirOne(clean, mode, false)
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	for i := range parts {
		if err := a.mkdirOne("/"+strings.Join(parts[:i+1], "/"), mode, true); err != nil {
			return err
		}
	}
	return nil
}

func (a *agent) mkdirOne(p string, mode uint32, existOK bool) error {
	if p == "/" {
		return nil
	}
	if existOK {
		if fd, err := a.resolve(p, unix.O_PATH|unix.O_DIRECTORY); err == nil {
			unix.Close(fd)
			return nil
		}
	}
	dirfd, base, err := a.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	return wrapPath(p, unix.Mkdirat(dirfd, base, mode))
}
