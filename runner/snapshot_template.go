package runner

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// SnapshotSummary is what a template made from a snapshot holds: its
// filesystem changes against the image, counted, the first paths, and
// warnings for what looks sensitive.
type SnapshotSummary struct {
	Added    int      `json:"added"`
	Modified int      `json:"modified"`
	Deleted  int      `json:"deleted"`
	Paths    []string `json:"paths"` // the first MaxSummaryPaths changed paths
	Warnings []string `json:"warnings,omitempty"`
}

// MaxSummaryPaths bounds SnapshotSummary.Paths.
const MaxSummaryPaths = 200

// changeLister is an engine that lists a container's filesystem changes
// against its image (runner/podman does).
type changeLister interface {
	Changes(ctx context.Context, id string) ([]Change, error)
}

// TemplateFromSnapshot commits a running sandbox as a new version of
// template name; the record holds the snapshot's change summary and a
// warning for each changed path that looks like a credential, shell
// history, a browser profile or a log. The sandbox keeps running.
func (r *Runner) TemplateFromSnapshot(ctx context.Context, id, name, policyHash string) (Template, error) {
	if !templateName.MatchString(name) {
		return Template{}, fmt.Errorf("template name %q: want lowercase letters, digits, '.', '_' or '-' (at most 63): %w", name, ErrInvalid)
	}
	sb, err := r.running(id)
	if err != nil {
		return Template{}, fmt.Errorf("template from snapshot: %w", err)
	}
	cl, ok := r.cfg.Engine.(changeLister)
	if !ok {
		return Template{}, fmt.Errorf("template from snapshot: the engine cannot list changes: %w", ErrUnsupported)
	}
	changes, err := cl.Changes(ctx, sb.ContainerID)
	if err != nil {
		return Template{}, fmt.Errorf("template from snapshot of %s: changes: %w", id, err)
	}
	sum := summarize(changes)
	log := fmt.Sprintf("snapshot of sandbox %s (image %s, %s)\n%d added, %d modified, %d deleted\n",
		id, sb.Image, sb.ImageID, sum.Added, sum.Modified, sum.Deleted)
	for _, w := range sum.Warnings {
		log += "warning: " + w + "\n"
	}
	for _, c := range changes {
		log += c.Kind + " " + c.Path + "\n"
	}
	req := TemplateRequest{Name: name, From: sb.Image, Policy: sb.Policy, PolicyHash: policyHash}
	t, err := r.commitTemplate(ctx, sb, req, sb.ImageID, nil, []byte(log), &sum)
	if err != nil {
		return Template{}, err
	}
	for _, w := range sum.Warnings {
		r.log.Warn("template from a snapshot holds something sensitive", "template", t.Ref, "sandbox", id, "warning", w)
	}
	return t, nil
}

func summarize(changes []Change) SnapshotSummary {
	var s SnapshotSummary
	seen := map[string]bool{}
	for _, c := range changes {
		switch c.Kind {
		case "added":
			s.Added++
		case "deleted":
			s.Deleted++
		default:
			s.Modified++
		}
		if len(s.Paths) < MaxSummaryPaths {
			s.Paths = append(s.Paths, c.Path)
		}
		if c.Kind == "deleted" {
			continue
		}
		if what := sensitive(c.Path); what != "" && !seen[what+c.Path] {
			seen[what+c.Path] = true
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s looks like %s", c.Path, what))
		}
	}
	if n := len(s.Warnings); n > 50 {
		s.Warnings = append(s.Warnings[:50], strconv.Itoa(n-50)+" more warnings (see the build log)")
	}
	return s
}

var (
	credentialNames = map[string]bool{".netrc": true, ".npmrc": true, ".pypirc": true, ".git-credentials": true,
		"credentials": true, "id_rsa": true, "id_ecdsa": true, "id_ed25519": true, "id_dsa": true, ".env": true,
		"hosts.yml": true, "config.json": false, ".pgpass": true, ".my.cnf": true, "token": true, ".vault-token": true}
	credentialDirs = []string{"/.aws/", "/.ssh/", "/.docker/", "/.kube/", "/.gnupg/", "/.config/gh/", "/.config/gcloud/", "/.azure/"}
	historyNames   = map[string]bool{".bash_history": true, ".zsh_history": true, ".ash_history": true, ".sh_history": true,
		".python_history": true, ".node_repl_history": true, ".psql_history": true, ".mysql_history": true, ".lesshst": true, ".viminfo": true}
	browserDirs = []string{"/.mozilla/", "/.config/google-chrome/", "/.config/chromium/", "/.cache/ms-playwright/", "/.config/BraveSoftware/", "/snap/firefox/"}
	browserName = map[string]bool{"Cookies": true, "Login Data": true, "cookies.sqlite": true, "logins.json": true, "key4.db": true}
)

// sensitive says what a changed path looks like ("" if nothing to warn of).
func sensitive(p string) string {
	base := path.Base(p)
	slashed := p + "/"
	switch {
	case historyNames[base]:
		return "shell history"
	case credentialNames[base] || strings.HasSuffix(base, ".pem") || strings.HasSuffix(base, ".key") ||
		strings.HasSuffix(base, ".p12") || strings.HasPrefix(base, ".env."):
		return "a credential"
	case hasAny(slashed, credentialDirs):
		return "a credential"
	case browserName[base] || hasAny(slashed, browserDirs):
		return "a browser profile"
	case strings.HasSuffix(base, ".log") || strings.HasPrefix(p, "/var/log/") || strings.Contains(base, ".log."):
		return "a log"
	}
	return ""
}

func hasAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
