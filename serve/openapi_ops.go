package serve

import (
	"airlock/audit"
	"airlock/client"
)

// apiOp describes one route for the OpenAPI document (openapi.go).
type apiOp struct {
	Summary string
	Query   []string // query parameters
	Body    any      // JSON request body (a value of its type), or a media type string
	Resp    any      // JSON response body, a media type string, or nil for 204
	Status  int      // success status; default 200 (204 with no Resp)
}

// Media types of the routes that do not answer with one JSON value.
const (
	mediaNDJSON = "application/x-ndjson"
	mediaTar    = "application/x-tar"
	mediaBytes  = "application/octet-stream"
	mediaSSE    = "text/event-stream"
	mediaHTML   = "text/html"
	mediaText   = "text/plain"
)

var logQuery = []string{"sandbox", "kind", "verdict", "category", "rule", "host", "since", "until", "after_seq", "up_to_seq", "limit", "newest"}

// apiOps is every route of the control API, by its ServeMux pattern.
var apiOps = map[string]apiOp{
	"GET /v1/health":       {Summary: "Health of the appliance and its components", Resp: client.Health{}},
	"GET /v1/openapi.json": {Summary: "This document", Resp: "application/json"},

	"POST /v1/sandboxes":               {Summary: "Create a sandbox", Body: client.CreateRequest{}, Resp: client.Sandbox{}, Status: 201},
	"GET /v1/sandboxes":                {Summary: "List the caller's sandboxes (an admin's: all)", Resp: []client.Sandbox{}},
	"GET /v1/sandboxes/{id}":           {Summary: "Describe a sandbox", Resp: client.Sandbox{}},
	"DELETE /v1/sandboxes/{id}":        {Summary: "Remove a sandbox"},
	"POST /v1/sandboxes/{id}/pause":    {Summary: "Freeze a sandbox's processes"},
	"POST /v1/sandboxes/{id}/resume":   {Summary: "Thaw a paused sandbox"},
	"POST /v1/sandboxes/{id}/snapshot": {Summary: "Commit a sandbox to an image", Resp: client.Snapshot{}},
	"POST /v1/sandboxes/{id}/reset":    {Summary: "Replace a sandbox's container, keeping its id and address", Resp: client.ResetResult{}},
	"POST /v1/sandboxes/{id}/exec": {Summary: "Run a command; NDJSON frames of output, then its exit (tty: an upgrade)",
		Body: client.ExecRequest{}, Resp: client.ExecFrame{}},
	"POST /v1/sandboxes/{id}/access":                  {Summary: "File an access request a person decides", Body: client.AccessRequest{}, Resp: client.Approval{}},
	"GET /v1/sandboxes/{id}/processes":                {Summary: "List the in-sandbox agent's processes", Resp: []client.Process{}},
	"POST /v1/sandboxes/{id}/processes/{exec}/kill":   {Summary: "Kill a background process"},
	"POST /v1/sandboxes/{id}/processes/{exec}/signal": {Summary: "Signal a process", Body: client.Signal{}},
	"GET /v1/sandboxes/{id}/processes/{exec}/attach":  {Summary: "Follow a process's output as NDJSON frames", Resp: mediaNDJSON},
	"POST /v1/sandboxes/{id}/previews":                {Summary: "Expose a sandbox port on the preview listener", Body: client.ExposeRequest{}, Resp: client.Preview{}, Status: 201},
	"GET /v1/sandboxes/{id}/previews":                 {Summary: "The live previews of a sandbox", Resp: []client.Preview{}},
	"DELETE /v1/sandboxes/{id}/previews/{preview}":    {Summary: "Revoke a preview, closing its connections"},
	"POST /v1/sandboxes/{id}/shell": {Summary: "Open a recorded shell session (an upgrade, like a tty exec); its record becomes the artifact shells/EXEC_ID.jsonl",
		Body: client.ExecRequest{}, Resp: mediaBytes},

	"PUT /v1/sandboxes/{id}/files":               {Summary: "Copy a tar stream into a directory", Query: []string{"path"}, Body: mediaTar},
	"GET /v1/sandboxes/{id}/files":               {Summary: "Copy a path out as a tar stream", Query: []string{"path"}, Resp: mediaTar},
	"GET /v1/sandboxes/{id}/fs/file":             {Summary: "Read one file", Query: []string{"path"}, Resp: mediaBytes},
	"PUT /v1/sandboxes/{id}/fs/file":             {Summary: "Write one file", Query: []string{"path", "mode"}, Body: mediaBytes, Resp: client.FileInfo{}},
	"DELETE /v1/sandboxes/{id}/fs/file":          {Summary: "Remove a file or directory", Query: []string{"path", "recursive"}},
	"GET /v1/sandboxes/{id}/fs/list":             {Summary: "List a directory", Query: []string{"path"}, Resp: []client.FileInfo{}},
	"GET /v1/sandboxes/{id}/fs/stat":             {Summary: "Describe a path", Query: []string{"path"}, Resp: client.FileInfo{}},
	"POST /v1/sandboxes/{id}/fs/mkdir":           {Summary: "Make a directory", Query: []string{"path", "parents", "mode"}},
	"GET /v1/sandboxes/{id}/diff":                {Summary: "Files changed in the sandbox", Resp: client.Diff{}},
	"GET /v1/sandboxes/{id}/artifacts":           {Summary: "The artifacts kept of a sandbox", Resp: client.Artifacts{}},
	"GET /v1/sandboxes/{id}/artifacts/{name...}": {Summary: "One artifact's bytes", Resp: mediaBytes},
	"GET /v1/sandboxes/{id}/summary":             {Summary: "A sandbox's egress at a glance", Resp: client.Summary{}},
	"GET /v1/sandboxes/{id}/report":              {Summary: "A sandbox's review report", Query: []string{"format"}, Resp: mediaHTML},

	"GET /v1/logs":          {Summary: "Audit events (the caller's sandboxes'; an admin's: all), NDJSON", Query: append([]string{"follow"}, logQuery...), Resp: audit.Event{}},
	"GET /v1/events/stream": {Summary: "Audit events as they are written, as server-sent events", Query: logQuery, Resp: mediaSSE},
	"GET /ui/":              {Summary: "The live view's page and assets", Resp: mediaHTML},
	"GET /ui/report/{id}":   {Summary: "A sandbox's report for the live view", Resp: mediaHTML},

	"GET /v1/approvals":          {Summary: "Held requests of the caller's sandboxes", Resp: []client.Approval{}},
	"POST /v1/approvals/{id}":    {Summary: "Approve or deny a held request", Body: client.Decision{}, Resp: client.Approval{}},
	"GET /v1/policies":           {Summary: "The loaded policies", Resp: []client.PolicyInfo{}},
	"GET /v1/policies/explain":   {Summary: "Explain a policy's decision on a request", Query: []string{"policy", "request"}, Resp: client.Explanation{}},
	"POST /v1/policies/reload":   {Summary: "Reload the policy directory", Resp: client.ReloadResult{}},
	"POST /v1/principals/reload": {Summary: "Reload the principals file", Resp: client.PrincipalsReload{}},
	"GET /v1/lockdown":           {Summary: "The kill switch's state", Resp: client.LockdownState{}},
	"POST /v1/lockdown":          {Summary: "Engage or lift the kill switch", Body: client.LockdownRequest{}, Resp: client.LockdownState{}},
	"GET /v1/cache":              {Summary: "The package cache's counts", Resp: client.CacheStats{}},
	"GET /v1/cache/entries":      {Summary: "The cached package artifacts, most recently used first", Query: []string{"name"}, Resp: []client.CacheEntry{}},
	"POST /v1/cache/purge":       {Summary: "Remove cached package artifacts (and all cached metadata)", Body: client.CachePurgeRequest{}, Resp: client.CachePurgeResult{}},

	"POST /v1/mcp":   {Summary: "MCP streamable HTTP: a JSON-RPC message; each tool call runs as the caller", Body: "application/json", Resp: mediaSSE},
	"GET /v1/mcp":    {Summary: "MCP streamable HTTP: the session's stream of server messages", Resp: mediaSSE},
	"DELETE /v1/mcp": {Summary: "MCP streamable HTTP: end the session (Mcp-Session-Id)"},

	"GET /v1/templates":           {Summary: "List templates", Resp: []client.Template{}},
	"POST /v1/templates":          {Summary: "Build a template", Body: client.TemplateRequest{}, Resp: client.Template{}},
	"GET /v1/templates/{ref}":     {Summary: "Describe a template version", Resp: client.Template{}},
	"GET /v1/templates/{ref}/log": {Summary: "A template build's log", Resp: mediaText},
	"DELETE /v1/templates/{ref}":  {Summary: "Remove a template version", Resp: []string{}},

	"POST /v1/pods":        {Summary: "Attach a pod's host veth to the kernel path (node mode, the CNI plugin's ADD)", Body: client.PodAttachRequest{}, Resp: client.Pod{}},
	"GET /v1/pods":         {Summary: "List attached pods (node mode)", Resp: []client.Pod{}},
	"POST /v1/pods/gc":     {Summary: "Detach every pod not in the list (node mode, the CNI plugin's GC)", Body: client.PodGCRequest{}, Resp: client.PodGCResult{}},
	"GET /v1/pods/{id}":    {Summary: "Check a pod's attachment (node mode, the CNI plugin's CHECK)", Resp: client.Pod{}},
	"DELETE /v1/pods/{id}": {Summary: "Detach and forget a pod, idempotently (node mode, the CNI plugin's DEL)"},
	"GET /v1/node":         {Summary: "Whether the node agent can take pods (the CNI plugin's STATUS)", Resp: client.NodeStatus{}},
}
