package runner

import (
	"encoding/json"
	"os"
	"path/filepath"

	"airlock/audit"
)

// commandRecorder keeps each sandbox's exec records in
// StateDir/sandboxes/<id>/commands.jsonl as they are emitted, so they are on
// disk for the artifacts however the sandbox or the appliance ends. Only
// sandboxes whose state directory exists are recorded (the file is never
// what creates it).
type commandRecorder struct {
	next audit.Emitter
	dir  string
}

func (c *commandRecorder) Emit(e audit.Event) {
	if e.Kind == audit.KindExec && validID(e.Sandbox) {
		c.append(e)
	}
	c.next.Emit(e)
}

func (c *commandRecorder) append(e audit.Event) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(c.dir, e.Sandbox, "commands.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}
