package runner

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"airlock/audit"
	"airlock/internal/safefile"
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

	mu    sync.Mutex
	files map[string]*commandsFile // open while the sandbox lives
}

// commandsFile is a sandbox's open commands.jsonl and its size: three
// records a command are appended without an open, stat and close each.
type commandsFile struct {
	f    *os.File
	size int64
}

// maxOpenCommands bounds the files kept open; past it they are closed
// and reopened as records come.
const maxOpenCommands = 256

// cutSuffix names the file beside commands.jsonl that says it was cut.
const cutSuffix = ".cut"

func (c *commandRecorder) Emit(e audit.Event) {
	if e.Kind == audit.KindExec && validID(e.Sandbox) {
		c.append(e)
	}
	c.next.Emit(e)
}

func (c *commandRecorder) append(e audit.Event) {
	b, err := audit.AppendJSON(nil, &e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	path := filepath.Join(c.dir, e.Sandbox, "commands.jsonl")
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.files[e.Sandbox]
	if cf == nil {
		f, st, err := safefile.OpenRegular(path, os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return
		}
		if c.files == nil || len(c.files) >= maxOpenCommands {
			c.closeAllLocked()
		}
		cf = &commandsFile{f: f, size: st.Size()}
		c.files[e.Sandbox] = cf
	}
	if c.max > 0 && cf.size+int64(len(b)) > c.max {
		c.cut(path, e.Sandbox)
		return
	}
	if _, err := cf.f.Write(b); err != nil {
		cf.f.Truncate(cf.size) // no partial line for the next record to run into
		c.closeLocked(e.Sandbox)
		return
	}
	cf.size += int64(len(b))
}

// close closes a sandbox's file once its state directory is gone
// (Runner.removeState).
func (c *commandRecorder) close(sandbox string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked(sandbox)
}

func (c *commandRecorder) closeLocked(sandbox string) {
	if cf := c.files[sandbox]; cf != nil {
		cf.f.Close()
		delete(c.files, sandbox)
	}
}

// closeAll closes every open file (the runner closes).
func (c *commandRecorder) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeAllLocked()
}

func (c *commandRecorder) closeAllLocked() {
	for _, cf := range c.files {
		cf.f.Close()
	}
	c.files = map[string]*commandsFile{}
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
