package serve

import "strings"

// routeScopes is the scope each route of the control API needs, by its
// ServeMux pattern. "" is any authenticated principal. A route missing
// here is admin-only (fail closed); TestRoutesHaveScopes keeps the table
// complete, TestOpenAPIMatchesRoutes keeps docs/openapi.json in step.
var routeScopes = map[string]string{
	"GET /v1/health":       "",
	"GET /v1/openapi.json": "",

	"POST /v1/sandboxes":                              ScopeCreate,
	"GET /v1/sandboxes":                               "",
	"GET /v1/sandboxes/{id}":                          "",
	"DELETE /v1/sandboxes/{id}":                       ScopeCreate,
	"POST /v1/sandboxes/{id}/pause":                   ScopeCreate,
	"POST /v1/sandboxes/{id}/resume":                  ScopeCreate,
	"POST /v1/sandboxes/{id}/snapshot":                ScopeCreate,
	"POST /v1/sandboxes/{id}/reset":                   ScopeCreate,
	"POST /v1/sandboxes/{id}/exec":                    ScopeExec,
	"POST /v1/sandboxes/{id}/access":                  ScopeExec,
	"GET /v1/sandboxes/{id}/processes":                ScopeExec,
	"POST /v1/sandboxes/{id}/processes/{exec}/kill":   ScopeExec,
	"POST /v1/sandboxes/{id}/processes/{exec}/signal": ScopeExec,
	"GET /v1/sandboxes/{id}/processes/{exec}/attach":  ScopeAttach,
	"POST /v1/sandboxes/{id}/previews":                ScopeExec,
	"GET /v1/sandboxes/{id}/previews":                 "",
	"DELETE /v1/sandboxes/{id}/previews/{preview}":    ScopeExec,
	"POST /v1/sandboxes/{id}/shell":                   ScopeAttach,

	"PUT /v1/sandboxes/{id}/files":               ScopeFiles,
	"GET /v1/sandboxes/{id}/files":               ScopeFiles,
	"GET /v1/sandboxes/{id}/fs/file":             ScopeFiles,
	"PUT /v1/sandboxes/{id}/fs/file":             ScopeFiles,
	"DELETE /v1/sandboxes/{id}/fs/file":          ScopeFiles,
	"GET /v1/sandboxes/{id}/fs/list":             ScopeFiles,
	"GET /v1/sandboxes/{id}/fs/stat":             ScopeFiles,
	"POST /v1/sandboxes/{id}/fs/mkdir":           ScopeFiles,
	"GET /v1/sandboxes/{id}/diff":                ScopeFiles,
	"GET /v1/sandboxes/{id}/artifacts":           ScopeFiles,
	"GET /v1/sandboxes/{id}/artifacts/{name...}": ScopeFiles,
	"GET /v1/sandboxes/{id}/summary":             ScopeLogs,
	"GET /v1/sandboxes/{id}/report":              ScopeLogs,
	"GET /v1/logs":                               ScopeLogs,
	"GET /v1/events/stream":                      ScopeLogs,
	"GET /ui/":                                   "",
	"GET /ui/report/{id}":                        ScopeLogs,
	"GET /v1/approvals":                          "",
	"POST /v1/approvals/{id}":                    ScopeApprove,
	"GET /v1/policies":                           "",
	"GET /v1/policies/explain":                   "",
	"POST /v1/policies/reload":                   ScopeAdmin,
	"POST /v1/principals/reload":                 ScopeAdmin,
	"GET /v1/lockdown":                           ScopeAdmin,
	"POST /v1/lockdown":                          ScopeAdmin,
	// MCP: each tool call is checked as the route it makes (mcp.go).
	"POST /v1/mcp":                "",
	"GET /v1/mcp":                 "",
	"DELETE /v1/mcp":              "",
	"GET /v1/cache":               ScopeAdmin,
	"GET /v1/cache/entries":       ScopeAdmin,
	"POST /v1/cache/purge":        ScopeAdmin,
	"GET /v1/templates":           "",
	"GET /v1/templates/{ref}":     "",
	"GET /v1/templates/{ref}/log": "",
	"POST /v1/templates":          ScopeAdmin,
	"DELETE /v1/templates/{ref}":  ScopeAdmin,

	// Node mode (serve --node): the CNI plugin's calls, on the unix socket.
	"POST /v1/pods":        ScopeAdmin,
	"GET /v1/pods":         ScopeAdmin,
	"POST /v1/pods/gc":     ScopeAdmin,
	"GET /v1/pods/{id}":    ScopeAdmin,
	"DELETE /v1/pods/{id}": ScopeAdmin,
	"GET /v1/node":         ScopeAdmin,
}

// routeScope is the scope a pattern needs; unknown patterns need admin.
func routeScope(pattern string) string {
	if s, ok := routeScopes[pattern]; ok {
		return s
	}
	return ScopeAdmin
}

// pathParam returns the value of {name} in path for pattern ("METHOD
// /a/{name}/b"), segment by segment; "" when the pattern has no such
// wildcard or the path does not line up.
func pathParam(pattern, path, name string) string {
	_, pp, _ := strings.Cut(pattern, " ")
	ps, xs := strings.Split(pp, "/"), strings.Split(path, "/")
	for i, seg := range ps {
		if seg != "{"+name+"}" {
			continue
		}
		if i < len(xs) {
			return xs[i]
		}
	}
	return ""
}

// sandboxParam is the sandbox a route acts on ({id} under /sandboxes/ or
// /ui/report/), "" for routes that name none.
func sandboxParam(pattern, path string) string {
	if strings.Contains(pattern, "/sandboxes/{id}") || strings.Contains(pattern, "/ui/report/{id}") {
		return pathParam(pattern, path, "id")
	}
	return ""
}
