package runner

import (
	"context"
	"strings"
	"testing"

	"airlock/audit"
)

func TestSensitive(t *testing.T) {
	for p, want := range map[string]string{
		"/root/.bash_history":                                 "shell history",
		"/root/.python_history":                               "shell history",
		"/root/.aws/credentials":                              "a credential",
		"/home/u/.ssh/id_ed25519":                             "a credential",
		"/root/.docker/config.json":                           "a credential",
		"/workspace/.env":                                     "a credential",
		"/workspace/.env.production":                          "a credential",
		"/etc/ssl/private/server.key":                         "a credential",
		"/root/.npmrc":                                        "a credential",
		"/root/.mozilla/firefox/x.default/prefs.js":           "a browser profile",
		"/root/.config/google-chrome/Default/Cookies":         "a browser profile",
		"/var/log/apt/history.log":                            "a log",
		"/workspace/build.log":                                "a log",
		"/usr/lib/python3/dist-packages/requests/__init__.py": "",
		"/etc/marker":                                         "",
		"/workspace/logbook.txt":                              "",
	} {
		if got := sensitive(p); got != want {
			t.Errorf("sensitive(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestTemplateFromSnapshot: a running sandbox becomes a template version
// whose record holds the change summary and a warning for each sensitive
// path; the sandbox keeps running.
func TestTemplateFromSnapshot(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	c := h.eng.containers[sb.ContainerID]
	c.files["/root/.bash_history"] = "curl -H 'Authorization: ...'\n"
	c.files["/root/.aws/credentials"] = "[default]\n"
	c.files["/opt/tool/bin/tool"] = "x"
	tm, err := h.r.TemplateFromSnapshot(ctx, sb.ID, "snap", "sha256:pp")
	if err != nil {
		t.Fatal(err)
	}
	s := tm.Snapshot
	if s == nil || s.Added != 3 || len(s.Paths) != 3 || len(s.Warnings) != 2 ||
		!strings.Contains(strings.Join(s.Warnings, "\n"), "/root/.bash_history looks like shell history") {
		t.Fatalf("summary %+v", s)
	}
	if tm.From != "img" || tm.FromImageID != "sha256:img" || tm.Ref != "snap:v1" {
		t.Errorf("template %+v", tm)
	}
	log, _ := h.r.BuildLog("snap:v1")
	if !strings.Contains(string(log), "warning: /root/.aws/credentials looks like a credential") {
		t.Errorf("build log:\n%s", log)
	}
	if got, err := h.r.Get(sb.ID); err != nil || got.State != audit.StateRunning {
		t.Errorf("the sandbox after the snapshot: %+v %v", got, err)
	}
}
