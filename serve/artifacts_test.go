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
