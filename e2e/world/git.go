package world

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GitRepo is the repository the git server holds, under its URL.
const GitRepo = "acme/demo.git"

// GitReadme is the content of README.md in the repository's one commit.
const GitReadme = "# airlock e2e demo\n\nServed by the hermetic world.\n"

// GitURL is the clone URL of the world's repository.
func (w *World) GitURL() string { return w.URL(RoleGit) + "/" + GitRepo }

// gitEnv keeps the host's git configuration out of the world's commands.
func (w *World) gitEnv() []string {
	return []string{
		"HOME=" + w.path("home"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
	}
}

func (w *World) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = w.gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("world: git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// makeRepo creates the bare repository with one commit; pushes are
// enabled so that a push that got through would land (and be recorded).
func (w *World) makeRepo(ctx context.Context) (string, error) {
	work := w.path("git-work")
	bare := w.path("git", GitRepo)
	for _, d := range []string{work, w.path("home"), filepath.Dir(bare)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("world: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte(GitReadme), 0o644); err != nil {
		return "", fmt.Errorf("world: %w", err)
	}
	steps := [][]string{
		{"init", "-q", "-b", "main", "."},
		{"add", "README.md"},
		{"-c", "user.name=World", "-c", "user.email=world@example.test", "commit", "-q", "-m", "initial commit"},
		{"clone", "-q", "--bare", ".", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
	}
	for _, s := range steps {
		if _, err := w.git(ctx, work, s...); err != nil {
			return "", err
		}
	}
	return w.git(ctx, work, "rev-parse", "HEAD")
}

// gitHandler serves the repository with git http-backend over CGI.
func (w *World) gitHandler(ctx context.Context) (http.Handler, error) {
	execPath, err := w.git(ctx, "/", "--exec-path")
	if err != nil {
		return nil, err
	}
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("world: git http-backend: %w", err)
	}
	env := append(w.gitEnv(), "GIT_PROJECT_ROOT="+w.path("git"), "GIT_HTTP_EXPORT_ALL=1")
	return &cgi.Handler{Path: backend, Root: "/", Env: env}, nil
}
