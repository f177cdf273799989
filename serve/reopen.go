package serve

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// ReopenOnSIGUSR1 reopens the JSONL stream file at its configured path on
// every SIGUSR1 until ctx ends: a log rotator renamed it (logrotate's
// postrotate; docs/operations.md). The hash chain continues in the new
// file.
func (a *Appliance) ReopenOnSIGUSR1(ctx context.Context) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(usr1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				a.ReopenStream()
			}
		}
	}()
}

// ReopenStream asks the audit pipeline to reopen its stream file before
// the next write.
func (a *Appliance) ReopenStream() {
	if a.pipeline != nil && a.pipeline.ReopenStream() {
		a.log.Info("audit: the JSONL stream is reopened at its path before the next record", "path", a.cfg.Audit.JSONL)
		return
	}
	a.log.Info("audit: SIGUSR1 ignored: the JSONL stream is not a file", "jsonl", a.cfg.Audit.JSONL)
}
