// Command airlock-front is bin/airlock, what users and agents run. It runs
// `airlock sandbox exec` itself — the call agents make hundreds of times a
// task — with a binary that links no HTTP stack and no command tree, so a
// round trip costs little more than starting a process (bench/exec.sh).
// Every other command line, and any exec line it does not take in full
// (internal/clifront.Parse), it hands to the CLI, airlock-cli beside it:
// same PID, arguments and environment, so nothing differs but the speed.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"airlock/internal/clifront"
)

// cliBinary is the CLI (cmd/airlock built with -tags airlock_thin), which
// make build puts beside this binary.
const cliBinary = "airlock-cli"

func main() {
	if x, ok := clifront.Parse(os.Args[1:]); ok {
		if code, handled := clifront.Run(x, os.Stdin, os.Stdout, os.Stderr); handled {
			os.Exit(code)
		}
	}
	self, err := os.Executable()
	if err == nil {
		cli := filepath.Join(filepath.Dir(self), cliBinary)
		err = syscall.Exec(cli, os.Args, os.Environ())
		err = fmt.Errorf("%s: %w (make build puts it beside %s)", cli, err, self)
	}
	fmt.Fprintf(os.Stderr, "airlock: running the CLI: %v\n", err)
	os.Exit(1)
}
