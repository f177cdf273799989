package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procFreezer stops a sandbox's processes from the host (root): it finds
// them by their PID namespace in /proc.
type procFreezer struct{}

// stopPasses bounds the rescans for processes forked while others stop.
const stopPasses = 50

func (procFreezer) Stop(initPid int) ([]int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPid))
	if err != nil {
		return nil, fmt.Errorf("pid namespace of %d (the sandbox's PID 1 is gone?): %w", initPid, err)
	}
	if own, err := os.Readlink("/proc/self/ns/pid"); err != nil || own == ns {
		return nil, fmt.Errorf("pid %d is not in a sandbox's own PID namespace (reused after the sandbox ended?): refusing to stop it", initPid)
	}
	stopped := map[int]bool{}
	var order []int
	for pass := 0; pass < stopPasses; pass++ {
		fresh := 0
		for _, pid := range nsPids(ns, initPid) {
			if stopped[pid] {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return order, fmt.Errorf("SIGSTOP %d: %w", pid, err)
			}
			stopped[pid] = true
			order = append(order, pid)
			fresh++
		}
		if fresh == 0 && allStopped(order) {
			return order, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return order, fmt.Errorf("processes kept appearing or running after %d passes", stopPasses)
}

func (procFreezer) Cont(pids []int) error {
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("SIGCONT %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// nsPids lists the processes whose PID namespace is ns, but skip.
func nsPids(ns string, skip int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

// allStopped: every pid that still exists is in state T (stopped) or gone.
func allStopped(pids []int) bool {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // gone
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			continue
		}
		switch s[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}
