package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"airlock/client"
	"airlock/runner"
)

// TemplateBackend is what the template endpoints need; a Backend without
// it answers them "unsupported".
type TemplateBackend interface {
	BuildTemplate(ctx context.Context, req client.TemplateRequest) (client.Template, error)
	Templates(ctx context.Context) ([]client.Template, error)
	Template(ctx context.Context, ref string) (client.Template, error)
	TemplateLog(ctx context.Context, ref string) ([]byte, error)
	RemoveTemplate(ctx context.Context, ref string) ([]string, error)
}

var _ TemplateBackend = (*Appliance)(nil)

// BuildTemplate runs the setup commands in a build sandbox under the
// policy (its egress decided and logged like any sandbox's) and records
// the committed result. A failing command's error carries what the policy
// denied in the build sandbox.
func (a *Appliance) BuildTemplate(ctx context.Context, req client.TemplateRequest) (client.Template, error) {
	if req.FromSandbox != "" {
		return a.templateFromSandbox(ctx, req)
	}
	name := req.Policy
	if name == "" {
		name = a.cfg.DefaultPolicy
	}
	ref, ok := a.policies.Get(name)
	if name == "" || !ok {
		return client.Template{}, client.Errorf(client.CodeInvalid, "template %s: policy %q is not loaded (see `airlock policy list`)", req.Name, name)
	}
	if req.From == "" {
		return client.Template{}, client.Errorf(client.CodeInvalid, "template %s: --from IMAGE is required", req.Name)
	}
	t, err := a.runner.BuildTemplate(ctx, runner.TemplateRequest{Name: req.Name, From: req.From, Setup: req.Setup,
		Policy: name, PolicyHash: ref.load().Hash(), ExecTimeout: a.cfg.Sandbox.ExecTimeout.Duration,
		Explain: a.denials})
	var te *runner.TemplateError
	if errors.As(err, &te) {
		return client.Template{}, client.Errorf(client.CodeInvalid, "%v", te)
	}
	if err != nil {
		return client.Template{}, apiError(err)
	}
	return clientTemplate(t), nil
}

func (a *Appliance) templateFromSandbox(ctx context.Context, req client.TemplateRequest) (client.Template, error) {
	if req.From != "" || len(req.Setup) > 0 || req.Policy != "" {
		return client.Template{}, client.Errorf(client.CodeInvalid, "template %s: from_sandbox excludes from, setup and policy", req.Name)
	}
	sb, err := a.runner.Get(req.FromSandbox)
	if err != nil {
		return client.Template{}, apiError(err)
	}
	hash := ""
	if ref, ok := a.policies.Get(sb.Policy); ok {
		hash = ref.load().Hash()
	}
	t, err := a.runner.TemplateFromSnapshot(ctx, sb.ID, req.Name, hash)
	if err != nil {
		return client.Template{}, apiError(err)
	}
	return clientTemplate(t), nil
}

// denials lists what the network path refused a sandbox so far.
func (a *Appliance) denials(id string) []string {
	var out []string
	for _, d := range a.tap.Summary(id).Denied {
		s := fmt.Sprintf("%s %s (rule %s", d.Kind, d.Destination, d.Rule)
		if d.Reason != "" {
			s += ", " + d.Reason
		}
		out = append(out, s+")")
	}
	return out
}

func clientTemplate(t runner.Template) client.Template {
	out := client.Template{Name: t.Name, Version: t.Version, Ref: t.Ref, Image: t.Image, ImageID: t.ImageID, From: t.From,
		FromImageID: t.FromImageID, Policy: t.Policy, PolicyHash: t.PolicyHash, Sandbox: t.Sandbox, Created: t.Created,
		Setup: []client.TemplateStep{}}
	if s := t.Snapshot; s != nil {
		out.Snapshot = &client.SnapshotSummary{Added: s.Added, Modified: s.Modified, Deleted: s.Deleted, Paths: s.Paths, Warnings: s.Warnings}
	}
	for _, s := range t.Setup {
		out.Setup = append(out.Setup, client.TemplateStep{Command: s.Command, ExitCode: s.ExitCode, DurationMS: s.DurationMS, TimedOut: s.TimedOut})
	}
	return out
}

// Templates lists every template version.
func (a *Appliance) Templates(context.Context) ([]client.Template, error) {
	ts, err := a.runner.Templates()
	out := make([]client.Template, 0, len(ts))
	for _, t := range ts {
		out = append(out, clientTemplate(t))
	}
	return out, apiError(err)
}

// Template returns one template version.
func (a *Appliance) Template(_ context.Context, ref string) (client.Template, error) {
	t, err := a.runner.Template(ref)
	return clientTemplate(t), apiError(err)
}

// TemplateLog returns a template version's build log.
func (a *Appliance) TemplateLog(_ context.Context, ref string) ([]byte, error) {
	b, err := a.runner.BuildLog(ref)
	return b, apiError(err)
}

// RemoveTemplate removes template versions and their images.
func (a *Appliance) RemoveTemplate(ctx context.Context, ref string) ([]string, error) {
	out, err := a.runner.RemoveTemplate(ctx, ref)
	return out, apiError(err)
}

func (a *API) templateBackend(w http.ResponseWriter, r *http.Request) (TemplateBackend, bool) {
	b, ok := backendAs[TemplateBackend](a, w, r, "has no templates")
	return b, ok
}

func (a *API) templateRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("POST "+v+"/templates", func(w http.ResponseWriter, r *http.Request) {
		var req client.TemplateRequest
		if b, ok := a.templateBackend(w, r); ok && a.decode(w, r, &req) {
			t, err := b.BuildTemplate(r.Context(), req)
			a.reply(w, r, t, err)
		}
	})
	mux.HandleFunc("GET "+v+"/templates", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := a.templateBackend(w, r); ok {
			ts, err := b.Templates(r.Context())
			replyList(a, w, r, ts, err)
		}
	})
	mux.HandleFunc("GET "+v+"/templates/{ref}", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := a.templateBackend(w, r); ok {
			t, err := b.Template(r.Context(), r.PathValue("ref"))
			a.reply(w, r, t, err)
		}
	})
	mux.HandleFunc("GET "+v+"/templates/{ref}/log", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := a.templateBackend(w, r); ok {
			log, err := b.TemplateLog(r.Context(), r.PathValue("ref"))
			if err != nil {
				a.fail(w, r, err)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write(log)
		}
	})
	mux.HandleFunc("DELETE "+v+"/templates/{ref}", func(w http.ResponseWriter, r *http.Request) {
		if b, ok := a.templateBackend(w, r); ok {
			out, err := b.RemoveTemplate(r.Context(), r.PathValue("ref"))
			a.reply(w, r, out, err)
		}
	})
}
