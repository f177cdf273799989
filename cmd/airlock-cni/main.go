// Command airlock-cni is a chained CNI plugin (spec 1.0.0 and 1.1.0: ADD,
// CHECK, DEL, GC, STATUS, VERSION). It runs after a main plugin such as
// ptp or bridge, takes the pod's interface and address from prevResult,
// and asks the Airlock node agent (`airlock serve --node`) over its
// control socket to steer the pod's host-side veth through the pinned
// eBPF path, register the address as a sandbox of kind "pod" and pick its
// policy: the pod annotation airlock/policy (runtimeConfig), else
// AIRLOCK_POLICY in CNI_ARGS, else the network's "policy", else the
// node's default_policy.
//
// ADD fails closed: when the agent is down or refuses, the host end of the
// pod's veth is deleted, so the pod has no network and does not start.
//
// `airlock-cni install` copies the binary and writes the chained conflist
// (the DaemonSet's init container in deploy/kubernetes/).
//
// Example conflist (docs/kubernetes.md):
//
//	{"cniVersion": "1.0.0", "name": "airlock", "plugins": [
//	  {"type": "ptp", "ipam": {"type": "host-local", "subnet": "198.18.4.0/24"}},
//	  {"type": "airlock-cni", "socket": "/run/airlock/airlock.sock",
//	   "capabilities": {"io.kubernetes.cri.pod-annotations": true}}]}
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

const about = "airlock-cni: steers a pod's egress through the Airlock node agent (proxy, dnsd, eBPF path)"

func main() {
	if isInstall(os.Args) {
		os.Exit(runInstall(os.Args[2:], os.Stderr))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: cmdAdd, Check: cmdCheck, Del: cmdDel, GC: cmdGC, Status: cmdStatus,
	}, version.PluginSupports("1.0.0", "1.1.0"), about)
}
