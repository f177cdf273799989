package runner

import (
	"encoding/json"
	"fmt"
	"log/slog"
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
	max  int64 // bytes per sandbox; records past it are not written here
	log  *slog.Logger
}

// cutSuffix names the file beside commands.jsonl that says it was cut.
const cutSuffix = ".cut"

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
	path := filepath.Join(c.dir, e.Sandbox, "commands.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || c.max > 0 && st.Size()+int64(len(b))+1 > c.max {
		c.cut(path, e.Sandbox)
		return
	}
	f.Write(append(b, '\n'))
}

// cut marks a sandbox's command records as cut at the bound (once).
func (c *commandRecorder) cut(path, sandbox string) {
	if _, err := os.Stat(path + cutSuffix); err == nil {
		return
	}
	msg := fmt.Sprintf("commands.jsonl reached its bound of %d bytes (artifacts.max_commands_mb): later exec records are in the audit store only\n", c.max)
	if err := os.WriteFile(path+cutSuffix, []byte(msg), 0o600); err == nil && c.log != nil {
		c.log.Warn("sandbox command records cut at their bound", "sandbox", sandbox, "max_bytes", c.max)
	}
}
