package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestTemplateBuild: setup commands run in a build sandbox under the
// policy, the result is committed and recorded with the image IDs, the
// steps and their exit codes, the policy hash and a build log; versions
// count up; a sandbox from the template records it; rm refuses a version in
// use and removes the rest.
func TestTemplateBuild(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	req := TemplateRequest{Name: "py", From: "img", Setup: []string{"echo one", "echo two"}, Policy: "p", PolicyHash: "sha256:pp"}
	t1, err := h.r.BuildTemplate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Ref != "py:v1" || t1.Image != TemplateRepo+"/py:v1" || t1.ImageID != "sha256:snap" || t1.FromImageID != "sha256:img" ||
		len(t1.Setup) != 2 || t1.Setup[1].Command != "echo two" || t1.Setup[1].ExitCode != 0 || t1.PolicyHash != "sha256:pp" {
		t.Errorf("template %+v", t1)
	}
	if !strings.Contains(h.t.String(), "engine.Commit") || len(h.r.List()) != 0 {
		t.Errorf("no commit, or the build sandbox is left: %v", h.r.List())
	}
	log, err := h.r.BuildLog("py:v1")
	if err != nil || !strings.Contains(string(log), "$ echo two\n") || !strings.Contains(string(log), "[exit 0") {
		t.Errorf("build log %q %v", log, err)
	}
	t2, err := h.r.BuildTemplate(ctx, req)
	if err != nil || t2.Version != 2 {
		t.Fatalf("second build %+v %v", t2, err)
	}
	if got, _ := h.r.Template("py"); got.Ref != "py:v2" {
		t.Errorf("newest %+v", got)
	}
	sb, err := h.r.Create(ctx, CreateRequest{Template: "py:v1", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Image != t1.Image || sb.Template != "py:v1" || sb.ImageID != "sha256:"+t1.Image ||
		h.eng.containers[sb.ContainerID].spec.Labels[LabelTemplate] != "py:v1" {
		t.Errorf("sandbox from the template %+v", sb)
	}
	if _, err := h.r.RemoveTemplate(ctx, "py"); !errors.Is(err, ErrInvalid) {
		t.Errorf("rm of a template in use: %v", err)
	}
	if got, err := h.r.RemoveTemplate(ctx, "py:v2"); err != nil || len(got) != 1 {
		t.Errorf("rm py:v2: %v %v", got, err)
	}
	if ts, _ := h.r.Templates(); len(ts) != 1 || ts[0].Ref != "py:v1" {
		t.Errorf("left %+v", ts)
	}
	if _, err := h.r.Template("py:v2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed version: %v", err)
	}
}

// TestTemplateBuildFailureLeavesNothing: a failing setup command stops the
// build with the command, its exit code, output and the denials; no image
// is committed and no record written.
func TestTemplateBuildFailureLeavesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.eng.execFn = func(_ context.Context, p Process) (ExitStatus, error) {
		if strings.Contains(strings.Join(p.Argv, " "), "fetch") {
			p.Stderr.Write([]byte("403 Forbidden by airlock\n"))
			return ExitStatus{Code: 22}, nil
		}
		return ExitStatus{}, nil
	}
	_, err := h.r.BuildTemplate(context.Background(), TemplateRequest{Name: "bad", From: "img", Policy: "p",
		Setup:   []string{"true", "fetch https://pkg.example.test/x", "true"},
		Explain: func(string) []string { return []string{"http pkg.example.test: no rule allows it"} }})
	var te *TemplateError
	if !errors.As(err, &te) || te.Step != 2 || te.ExitCode != 22 || !strings.Contains(te.Output, "403 Forbidden") ||
		len(te.Denials) != 1 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v (%+v)", err, te)
	}
	if strings.Contains(h.t.String(), "engine.Commit") {
		t.Error("a failed build committed an image")
	}
	if ts, _ := h.r.Templates(); len(ts) != 0 {
		t.Errorf("records after a failed build: %+v", ts)
	}
	if len(h.r.List()) != 0 {
		t.Error("the build sandbox is left")
	}
	if _, err := h.r.BuildTemplate(context.Background(), TemplateRequest{Name: "Bad/Name", From: "img", Policy: "p"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad name: %v", err)
	}
}
