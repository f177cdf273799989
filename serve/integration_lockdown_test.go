package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// lockdownInLab: on the real appliance with a real Podman sandbox, the kill
// switch stops the sandbox's traffic (drops reported as kernel:lockdown),
// survives a crash and restart of serve, and lifting it restores the
// network; every change is a lockdown event with who and why.
func lockdownInLab(t *testing.T, l *lab, sb client.Sandbox) {
	ctx := context.Background()
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo"
	get := curlOpts + "--max-time 5 --noproxy '*' -o /dev/null -w '%{http_code}' " + url
	if r := l.exec(sb.ID, get); r.stdout != "200" {
		t.Fatalf("before the lockdown: %v", r)
	}
	start := time.Now()
	st, err := l.c.SetLockdown(ctx, client.LockdownRequest{Reason: "lab incident"})
	if err != nil || st.All == nil {
		t.Fatalf("lockdown: %+v, %v\n%s", st, err, l.tail(20))
	}
	t.Logf("POST /v1/lockdown over the socket, kernel switch and record included: %v", time.Since(start))
	mark := l.w.Mark()
	if r := l.exec(sb.ID, get); r.code == 0 {
		t.Errorf("under lockdown the sandbox reached the registry: %v", r)
	}
	if r := l.exec(sb.ID, "getent hosts "+l.w.Name(world.RoleNPM)+"; echo rc=$?"); !strings.Contains(r.stdout, "rc=2") {
		t.Errorf("under lockdown a name resolved: %v", r)
	}

	l.kill9()
	l.startServe()
	if got, err := l.c.Lockdown(ctx); err != nil || got.All == nil || got.All.Reason != "lab incident" {
		t.Fatalf("after a restart the lockdown is %+v, %v", got, err)
	}
	if r := l.exec(sb.ID, get); r.code == 0 {
		t.Errorf("after a restart under lockdown the sandbox reached the registry: %v", r)
	}
	if got := l.w.Since(mark); len(got) > 0 {
		t.Errorf("the world recorded %d requests during the lockdown", len(got))
	}
	waitFor(t, 10*time.Second, "a kernel:lockdown drop of the sandbox", func() bool {
		_, ok := findEvent(l.events(sb.ID), func(e audit.Event) bool { return e.Kind == audit.KindDrop && e.Rule == "kernel:lockdown" })
		return ok
	})

	if _, err := l.c.SetLockdown(ctx, client.LockdownRequest{Lift: true, Reason: "lab contained"}); err != nil {
		t.Fatal(err)
	}
	if r := l.exec(sb.ID, get); r.stdout != "200" {
		t.Fatalf("after the lift: %v\n%s", r, l.tail(20))
	}

	// One sandbox alone.
	if _, err := l.c.SetLockdown(ctx, client.LockdownRequest{Sandbox: sb.ID, Reason: "just this one"}); err != nil {
		t.Fatal(err)
	}
	if r := l.exec(sb.ID, get); r.code == 0 {
		t.Errorf("a blocked sandbox reached the registry: %v", r)
	}
	if _, err := l.c.SetLockdown(ctx, client.LockdownRequest{Sandbox: sb.ID, Lift: true, Reason: "cleared"}); err != nil {
		t.Fatal(err)
	}
	if r := l.exec(sb.ID, get); r.stdout != "200" {
		t.Fatalf("after lifting the sandbox's block: %v", r)
	}

	var got []string
	err = l.c.Logs(ctx, client.LogQuery{Kind: audit.KindLockdown}, func(e audit.Event) error {
		got = append(got, e.Lockdown.Action+" "+e.Lockdown.Scope+" "+e.Reason+" by="+e.Lockdown.By)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"engaged all lab incident by=root (uid 0)", "restored all lab incident by=airlock serve",
		"lifted all lab contained by=root (uid 0)", "engaged sandbox just this one by=root (uid 0)", "lifted sandbox cleared by=root (uid 0)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lockdown events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
