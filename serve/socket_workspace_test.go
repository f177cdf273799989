package serve

import (
	"context"
	"os"
	"testing"

	"airlock/client"
)

// TestSocketWorkspaceMustBeTheCallers: on the local socket (open to the
// airlock group) a host workspace is refused unless the caller is root or
// owns the directory; over TCP the admin scope decides (createLimits).
func TestSocketWorkspaceMustBeTheCallers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the test chowns a directory to another uid")
	}
	rootDir, userDir := t.TempDir(), t.TempDir()
	if err := os.Chown(userDir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	as := func(uid uint32) context.Context { return context.WithValue(context.Background(), keyPeerUID{}, uid) }
	for _, c := range []struct {
		name string
		ctx  context.Context
		dir  string
		code string // "" = allowed
	}{
		{"a user naming a root-owned directory", as(4242), rootDir, client.CodeForbidden},
		{"a user naming /etc", as(4242), "/etc", client.CodeForbidden},
		{"a user naming their own directory", as(4242), userDir, ""},
		{"another user naming it", as(4343), userDir, client.CodeForbidden},
		{"root", as(0), rootDir, ""},
		{"no workspace", as(4242), "", ""},
		{"a missing directory", as(4242), rootDir + "/missing", client.CodeInvalid},
		{"over TCP (no peer uid)", context.Background(), rootDir, ""},
	} {
		e := socketWorkspace(c.ctx, c.dir)
		switch {
		case c.code == "" && e != nil:
			t.Errorf("%s: refused: %v", c.name, e)
		case c.code != "" && (e == nil || e.Code != c.code):
			t.Errorf("%s: %v, want %s", c.name, e, c.code)
		}
	}
}
