package serve

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"airlock/client"
)

type artifactFake struct {
	*fakeBackend
	opened []string
}

func (f *artifactFake) Artifacts(_ context.Context, id string) (client.Artifacts, error) {
	if id != "sb1" {
		return client.Artifacts{}, client.Errorf(client.CodeNotFound, "no artifacts of %q", id)
	}
	return client.Artifacts{Sandbox: client.Sandbox{ID: id}, Reason: "lifetime expired",
		Files: []client.ArtifactFile{{Name: "files/sub/a b.txt", Kind: "file", Size: 3}}}, nil
}

func (f *artifactFake) OpenArtifact(_ context.Context, id, name string) (io.ReadCloser, client.ArtifactFile, error) {
	f.opened = append(f.opened, id+" "+name)
	if name != "files/sub/a b.txt" {
		return nil, client.ArtifactFile{}, client.Errorf(client.CodeNotFound, "no artifact %q", name)
	}
	return io.NopCloser(strings.NewReader("abc")), client.ArtifactFile{Name: name, Size: 3, SHA256: "x"}, nil
}

// TestArtifactsAPI: the manifest and a file with a nested, spaced name go
// through the client; an unknown name is not found; a backend that keeps
// no artifacts says so.
func TestArtifactsAPI(t *testing.T) {
	fb := &artifactFake{fakeBackend: newFake()}
	c, _ := startAPI(t, fb, "")
	ctx := context.Background()
	a, err := c.Artifacts(ctx, "sb1")
	if err != nil || a.Reason != "lifetime expired" || len(a.Files) != 1 {
		t.Fatalf("manifest %+v %v", a, err)
	}
	var b bytes.Buffer
	if err := c.Artifact(ctx, "sb1", "files/sub/a b.txt", &b); err != nil || b.String() != "abc" {
		t.Fatalf("artifact %q %v", b.String(), err)
	}
	if err := c.Artifact(ctx, "sb1", "nope", io.Discard); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("unknown artifact: %v", err)
	}
	if fb.opened[0] != "sb1 files/sub/a b.txt" {
		t.Errorf("opened %q", fb.opened)
	}
	if _, err := c.Artifacts(ctx, "other"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
	plain, _ := startAPI(t, newFake(), "")
	if _, err := plain.Artifacts(ctx, "sb1"); !client.IsCode(err, client.CodeUnsupported) {
		t.Errorf("backend without artifacts: %v", err)
	}
}

func (f *artifactFake) Reset(_ context.Context, id string) (client.ResetResult, error) {
	if id != "sb1" {
		return client.ResetResult{}, client.Errorf(client.CodeNotFound, "no sandbox %q", id)
	}
	return client.ResetResult{Sandbox: client.Sandbox{ID: id, Address: "198.18.0.2"}, OldContainer: "a", NewContainer: "b"}, nil
}

// TestResetAPI: the route reaches the backend; one without reset says so.
func TestResetAPI(t *testing.T) {
	c, _ := startAPI(t, &artifactFake{fakeBackend: newFake()}, "")
	ctx := context.Background()
	res, err := c.Reset(ctx, "sb1")
	if err != nil || res.NewContainer != "b" || res.Sandbox.Address != "198.18.0.2" {
		t.Fatalf("reset %+v %v", res, err)
	}
	if _, err := c.Reset(ctx, "x"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
	plain, _ := startAPI(t, newFake(), "")
	if _, err := plain.Reset(ctx, "sb1"); !client.IsCode(err, client.CodeUnsupported) {
		t.Errorf("backend without reset: %v", err)
	}
}

type templateFake struct {
	*fakeBackend
	built []client.TemplateRequest
}

func (f *templateFake) BuildTemplate(_ context.Context, req client.TemplateRequest) (client.Template, error) {
	f.built = append(f.built, req)
	if req.Name == "bad" {
		return client.Template{}, client.Errorf(client.CodeInvalid, "template bad: setup command 1 %q exited 22", req.Setup[0])
	}
	return client.Template{Name: req.Name, Version: 1, Ref: req.Name + ":v1"}, nil
}

func (f *templateFake) Templates(context.Context) ([]client.Template, error) {
	return []client.Template{{Ref: "py:v1"}}, nil
}

func (f *templateFake) Template(_ context.Context, ref string) (client.Template, error) {
	return client.Template{Ref: ref}, nil
}

func (f *templateFake) TemplateLog(context.Context, string) ([]byte, error) {
	return []byte("$ true\n"), nil
}

func (f *templateFake) RemoveTemplate(_ context.Context, ref string) ([]string, error) {
	return []string{ref}, nil
}

// TestTemplateAPI: every template route reaches the backend with its
// arguments; a failed build is an invalid error with the command.
func TestTemplateAPI(t *testing.T) {
	fb := &templateFake{fakeBackend: newFake()}
	c, _ := startAPI(t, fb, "")
	ctx := context.Background()
	tm, err := c.BuildTemplate(ctx, client.TemplateRequest{Name: "py", From: "img", Setup: []string{"pip install x"}, Policy: "p"})
	if err != nil || tm.Ref != "py:v1" || fb.built[0].Setup[0] != "pip install x" {
		t.Fatalf("build %+v %v %+v", tm, err, fb.built)
	}
	if _, err := c.BuildTemplate(ctx, client.TemplateRequest{Name: "bad", Setup: []string{"curl x"}}); !client.IsCode(err, client.CodeInvalid) ||
		!strings.Contains(err.Error(), `"curl x" exited 22`) {
		t.Errorf("failed build: %v", err)
	}
	if ts, err := c.Templates(ctx); err != nil || len(ts) != 1 {
		t.Errorf("ls %v %v", ts, err)
	}
	if got, err := c.Template(ctx, "py:v1"); err != nil || got.Ref != "py:v1" {
		t.Errorf("show %+v %v", got, err)
	}
	var b bytes.Buffer
	if err := c.TemplateLog(ctx, "py:v1", &b); err != nil || b.String() != "$ true\n" {
		t.Errorf("log %q %v", b.String(), err)
	}
	if got, err := c.RemoveTemplate(ctx, "py:v1"); err != nil || len(got) != 1 {
		t.Errorf("rm %v %v", got, err)
	}
	plain, _ := startAPI(t, newFake(), "")
	if _, err := plain.Templates(ctx); !client.IsCode(err, client.CodeUnsupported) {
		t.Errorf("backend without templates: %v", err)
	}
}
