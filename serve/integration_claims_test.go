//go:build remote

package serve_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// TestClaimsShareNothing: two creates claim two warm members one after the
// other; the second user finds nothing of the first (files in /tmp and
// /workspace, a background process, its environment), is never handed the
// first's member, and its egress is recorded under its own id alone.
func TestClaimsShareNothing(t *testing.T) {
	l := poolLab(t, 1, "200ms")
	ctx := context.Background()
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo"
	claim := func(task string, made int) client.Sandbox { // made: members made so far, this one among them
		t.Helper()
		pooled := waitPooled(t, l, made, nil)
		sb, err := l.c.Create(ctx, client.CreateRequest{Image: debianImage, Env: map[string]string{"TASK": task}})
		if err != nil {
			t.Fatalf("create: %v\n%s", err, l.tail(20))
		}
		if !slices.Contains(pooled, sb.ID) {
			t.Fatalf("create %s did not claim a member of %v", sb.ID, pooled)
		}
		return sb
	}

	first := claim("first", 1)
	if r := l.exec(first.ID, "echo secret > /tmp/first; echo secret > /workspace/first; echo $TASK; "+
		curlOpts+"--noproxy '*' -o /dev/null -w ' %{http_code}' "+url); r.stdout != "first\n 200" {
		t.Fatalf("the first user's work: %v", r)
	}
	if _, err := l.c.Exec(ctx, first.ID, client.ExecRequest{Argv: []string{"sleep", "3601"}, Background: true}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := l.c.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}

	second := claim("second", 2)
	if second.ID == first.ID {
		t.Fatalf("member %s was claimed twice", second.ID)
	}
	r := l.exec(second.ID, "ls /tmp /workspace; echo TASK=$TASK; ps -eo args; "+
		curlOpts+"--noproxy '*' -o /dev/null -w 'http %{http_code}' "+url)
	for _, leak := range []string{"first", "sleep 3601"} {
		if strings.Contains(r.stdout, leak) {
			t.Errorf("the second user sees %q of the first:\n%s", leak, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "TASK=second") || !strings.HasSuffix(r.stdout, "http 200") {
		t.Errorf("the second user's own environment and egress: %v", r)
	}
	var egress int
	for _, e := range l.events(second.ID) {
		if e.Kind == audit.KindHTTP || e.Kind == audit.KindFlow || e.Kind == audit.KindDNS {
			egress++
		}
	}
	if egress == 0 {
		t.Errorf("the second user's egress is not recorded under its id %s", second.ID)
	}
	for _, e := range l.events(first.ID) {
		if e.Time.After(second.Created) && (e.Kind == audit.KindHTTP || e.Kind == audit.KindFlow || e.Kind == audit.KindDNS) {
			t.Errorf("egress after the first user ended is recorded under its id: %+v", e)
		}
	}
}
