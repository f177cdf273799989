package podman

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/containers/podman/v5/pkg/bindings/containers"
)

// killExec kills an exec session's process and its descendants by host PID
// (the 4.3 service has no way to stop an attached exec). The PID is checked
// to be in the container's PID namespace first, so a recycled PID of the
// host is never killed.
func (e *Engine) killExec(c context.Context, id, session string) error {
	in, err := containers.ExecInspect(c, session, nil)
	if err != nil {
		return wrap(err)
	}
	if !in.Running || in.Pid <= 0 {
		return nil // already ended
	}
	ctr, err := containers.Inspect(c, id, nil)
	if err != nil {
		return wrap(err)
	}
	if ctr.State == nil || ctr.State.Pid <= 0 {
		return nil
	}
	want, err := pidNS(ctr.State.Pid)
	if err != nil {
		return err
	}
	if ns, err := pidNS(in.Pid); err != nil || ns != want {
		return nil // gone, or not the sandbox's process any more
	}
	for _, pid := range append(descendants(in.Pid), in.Pid) {
		if ns, err := pidNS(pid); err == nil && ns == want {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

func pidNS(pid int) (string, error) {
	l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return "", fmt.Errorf("pid namespace of %d: %w", pid, err)
	}
	return l, nil
}

// descendants returns every process below pid, from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppid(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 100000 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
