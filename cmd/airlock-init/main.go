// Command airlock-init is the in-sandbox agent: the sandbox's PID 1. It
// reaps every process, handles every signal itself, and serves the
// process and files API to the appliance on an abstract unix socket in the
// sandbox's own network namespace (agentwire.SocketName). Only a peer that
// entered the namespace from the host (SO_PEERCRED pid 0, the overflow uid)
// is served; every other peer is refused and logged. See
// ../../../shared/notes/agent.md for the design and its evidence.
//
// Built static (CGO_ENABLED=0) by `make build` into bin/airlock-init and
// bind-mounted read-only at /.airlock in every sandbox.
//
// Run with argv[0] shimName it is the per-command supervisor instead (see
// shim.go): a child subreaper that ends a command's whole tree.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

const shimName = agentwire.ShimName

func main() {
	// First thing: a dumpable PID 1 lets any root process of the sandbox
	// ptrace it, read its memory and take its listener (notes/agent.md).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fatal("prctl(PR_SET_DUMPABLE, 0): %v", err)
	}
	if filepath.Base(os.Args[0]) == shimName {
		os.Exit(shimMain(os.Args[1:]))
	}
	if os.Getpid() != 1 {
		fatal("airlock-init serves only as a sandbox's PID 1 (this is pid %d)", os.Getpid())
	}
	a, err := newAgent()
	if err != nil {
		fatal("%v", err)
	}
	a.run()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "airlock-init: "+format+"\n", args...)
}

func fatal(format string, args ...any) {
	logf(format, args...)
	os.Exit(1)
}
