package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"airlock/audit"
	"airlock/client"
	"airlock/runner"
)

// ArtifactBackend is what the artifacts endpoints need; a Backend without it
// answers them "unsupported".
type ArtifactBackend interface {
	Artifacts(ctx context.Context, id string) (client.Artifacts, error)
	// OpenArtifact opens one listed artifact of an ended sandbox.
	OpenArtifact(ctx context.Context, id, name string) (io.ReadCloser, client.ArtifactFile, error)
}

var _ ArtifactBackend = (*Appliance)(nil)

func (c Artifacts) runner() runner.ArtifactConfig {
	return runner.ArtifactConfig{MaxAge: c.MaxAge.Duration, MaxTotalBytes: c.MaxTotalMB << 20,
		MaxSandboxBytes: c.MaxSandboxMB << 20, MaxFileBytes: c.MaxFileMB << 20,
		MaxWorkspaceBytes: c.MaxWorkspaceMB << 20, MaxCommandsBytes: c.MaxCommandsMB << 20}
}

// writeReport is the runner's artifact hook: the review report of the
// sandbox, from the events stored so far, as report.md.
func (a *Appliance) writeReport(ctx context.Context, sb runner.Sandbox, dir string) error {
	if a.pipeline == nil || a.pipeline.Store() == nil {
		return nil
	}
	rep, err := audit.BuildReport(ctx, a.pipeline.Store(), sb.ID)
	if err != nil {
		return fmt.Errorf("build the report: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "report.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := rep.Markdown(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Artifacts lists what an ended sandbox left.
func (a *Appliance) Artifacts(_ context.Context, id string) (client.Artifacts, error) {
	m, err := a.runner.Artifacts(id)
	if err != nil {
		return client.Artifacts{}, apiError(err)
	}
	out := client.Artifacts{Sandbox: a.describe(m.Sandbox), Reason: m.Reason, Ended: m.Ended, Bytes: m.Bytes,
		Skipped: m.Skipped, Errors: m.Errors}
	out.Sandbox.State = client.StateEnded
	for _, f := range m.Files {
		out.Files = append(out.Files, client.ArtifactFile{Name: f.Name, Kind: f.Kind, Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	for _, c := range m.Changes {
		out.Changes = append(out.Changes, client.Change{Path: c.Path, Kind: c.Kind, Binary: c.Binary})
	}
	return out, nil
}

// OpenArtifact opens one artifact.
func (a *Appliance) OpenArtifact(_ context.Context, id, name string) (io.ReadCloser, client.ArtifactFile, error) {
	f, af, err := a.runner.OpenArtifact(id, name)
	if err != nil {
		return nil, client.ArtifactFile{}, apiError(err)
	}
	return f, client.ArtifactFile{Name: af.Name, Kind: af.Kind, Path: af.Path, Size: af.Size, SHA256: af.SHA256}, nil
}

func (a *API) artifactBackend(w http.ResponseWriter, r *http.Request) (ArtifactBackend, bool) {
	b, ok := backendAs[ArtifactBackend](a, w, r, "keeps no sandbox artifacts")
	return b, ok
}

// artifacts: GET /v1/sandboxes/{id}/artifacts — the manifest.
func (a *API) artifacts(w http.ResponseWriter, r *http.Request) {
	b, ok := a.artifactBackend(w, r)
	if !ok {
		return
	}
	m, err := b.Artifacts(r.Context(), r.PathValue("id"))
	a.reply(w, r, m, err)
}

// artifact: GET /v1/sandboxes/{id}/artifacts/{name...} — one file's bytes.
func (a *API) artifact(w http.ResponseWriter, r *http.Request) {
	b, ok := a.artifactBackend(w, r)
	if !ok {
		return
	}
	rc, af, err := b.OpenArtifact(r.Context(), r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(af.Size, 10))
	w.Header().Set("X-Airlock-Sha256", af.SHA256)
	w.WriteHeader(http.StatusOK)
	io.Copy(w, io.LimitReader(rc, af.Size))
}
