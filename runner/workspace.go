package runner

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// prepareWorkspace checks a bind workspace and hands it to the sandbox user
// (the containers' root), which must be able to reach it.
func (r *Runner) prepareWorkspace(w Workspace) error {
	if w.HostDir == "" {
		return nil
	}
	fi, err := os.Stat(w.HostDir)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace %s is not a directory: %w", w.HostDir, ErrInvalid)
	}
	if w.Mode != WorkspaceBind {
		return nil
	}
	if r.uid < 0 {
		return fmt.Errorf("workspace: sandbox user %q does not exist (run 'make setup')", r.cfg.SandboxUser)
	}
	if err := searchable(filepath.Dir(w.HostDir), r.uid, r.gid); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return chownTree(w.HostDir, r.uid, r.gid)
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("workspace: hand %s to the sandbox user: %w", p, err)
		}
		return nil
	})
}

// searchable checks that uid/gid can traverse dir and all its parents.
func searchable(dir string, uid, gid int) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		m := fi.Mode().Perm()
		okx := m&0o001 != 0 || (ok && int(st.Uid) == uid && m&0o100 != 0) || (ok && int(st.Gid) == gid && m&0o010 != 0)
		if !okx {
			return fmt.Errorf("%s (mode %v) is not searchable by the sandbox user: make it o+x or choose another directory", d, m)
		}
		if d == "/" {
			return nil
		}
	}
}

// DetectCgroups reports which rootless cgroup limits the host enforces: all
// on a unified cgroup v2 hierarchy, none on v1 or hybrid hosts.
func DetectCgroups() CgroupSupport {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		return CgroupSupport{}
	}
	const cgroup2Magic = 0x63677270
	if st.Type != cgroup2Magic {
		return CgroupSupport{}
	}
	return CgroupSupport{Memory: true, CPU: true, Pids: true}
}
