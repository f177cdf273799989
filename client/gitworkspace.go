package client

import (
	"fmt"
	"net/url"
	"strings"
)

// GitWorkspaceDir is where a workspace_git repository is cloned.
const GitWorkspaceDir = "/workspace"

// maxGitURL bounds a workspace_git URL.
const maxGitURL = 2048

// ValidateGitURL checks a workspace_git URL: https only, a host, and no
// credentials — neither user:password@ nor a query string, where access
// tokens hide. Private repositories get their credential from a task
// secret injected by the proxy (an inject rule on the git category), which
// keeps it out of the sandbox.
func ValidateGitURL(s string) error {
	bad := func(why string) error { return Errorf(CodeInvalid, "workspace_git %q: %s", redactURL(s), why) }
	if s == "" {
		return bad("empty")
	}
	if len(s) > maxGitURL {
		return bad(fmt.Sprintf("longer than %d bytes", maxGitURL))
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return bad("contains a space or a control character")
		}
	}
	if !strings.HasPrefix(s, "https://") {
		return bad("only https:// URLs are cloned (the proxy decides them like any other request)")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return bad("not a URL")
	case u.User != nil:
		return bad("has credentials in it: give them as a task secret (--secret) with an inject rule in the policy instead")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("has a query string (credentials are not put in URLs): remove it")
	case u.Fragment != "":
		return bad("has a #fragment: remove it")
	case u.Opaque != "" || u.Hostname() == "":
		return bad("has no host")
	case u.Path == "" || u.Path == "/":
		return bad("names no repository")
	}
	return nil
}

// GitCloneArgv is the setup command that clones a workspace_git URL into
// /workspace, from inside the sandbox so its policy decides the clone.
func GitCloneArgv(u string) []string {
	return []string{"git", "clone", "--depth", "1", "--", u, GitWorkspaceDir}
}

// redactURL hides the userinfo of a URL in error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		if u.User != nil {
			u.User = url.User("REDACTED")
		}
		if u.RawQuery != "" {
			u.RawQuery = "REDACTED"
		}
		return u.String()
	}
	if i := strings.Index(s, "@"); i >= 0 && strings.Contains(s[:i], "://") {
		return s[:strings.Index(s, "://")+3] + "REDACTED" + s[i:]
	}
	return s
}
