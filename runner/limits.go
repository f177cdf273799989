package runner

import (
	"fmt"
	"strconv"
)

const (
	whyNproc  = "RLIMIT_NPROC counts every process of the sandbox user on the host (service, conmon) and breaks exec when rootless; not applied"
	whyCgroup = "rootless cgroup limits need cgroup v2 with delegation; this host does not have it"
)

// limitReport says which limits are in force for a request on a host with
// the given cgroup support.
func limitReport(l Limits, cg CgroupSupport) []LimitReport {
	nofile := l.NoFile
	if nofile == 0 {
		nofile = DefaultNoFile
	}
	r := []LimitReport{
		{Name: "nofile", Value: strconv.FormatUint(nofile, 10), Requested: true, InForce: true},
		{Name: "fsize", Value: unlimitedU(l.FileSizeBytes), Requested: l.FileSizeBytes > 0, InForce: l.FileSizeBytes > 0},
		{Name: "nproc", Value: unlimitedU(l.Procs), Requested: l.Procs > 0, Reason: whyNproc},
		cgroupLimit("memory", unlimitedI(l.MemoryBytes), l.MemoryBytes > 0, cg.Memory),
		cgroupLimit("cpus", strconv.FormatFloat(l.CPUs, 'g', -1, 64), l.CPUs > 0, cg.CPU),
		cgroupLimit("pids", unlimitedI(l.Pids), l.Pids > 0, cg.Pids),
	}
	if !r[1].Requested {
		r[1].Reason = "not requested"
	}
	return r
}

func cgroupLimit(name, value string, requested, supported bool) LimitReport {
	lr := LimitReport{Name: name, Value: value, Requested: requested, InForce: requested && supported}
	switch {
	case !supported:
		lr.Reason = whyCgroup
	case !requested:
		lr.Reason = "not requested"
	}
	return lr
}

func unlimitedU(v uint64) string {
	if v == 0 {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

func unlimitedI(v int64) string {
	if v == 0 {
		return "unlimited"
	}
	return fmt.Sprint(v)
}
