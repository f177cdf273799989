package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
)

func TestFiledAccessRequest(t *testing.T) {
	rec := &recorder{}
	a := newApprovals(rec, time.Minute, nil)
	ap := a.File("sb-1", "https://docs.example.test/", "read the docs")
	if ap.State != "held" || ap.Reason != "read the docs" || ap.Rule != "request_access" || ap.ID == "" {
		t.Fatalf("filed: %+v", ap)
	}
	if got := a.List(); len(got) != 1 || got[0].ID != ap.ID {
		t.Fatalf("list: %+v", got)
	}
	got, err := a.Decide(ap.ID, client.Decision{Approve: true, For: client.Duration(time.Hour)}, "alice")
	if err != nil || got.State != "approved" || got.DecidedBy != "alice" {
		t.Fatalf("decide: %+v %v", got, err)
	}
	if !a.granted("sb-1", "https://docs.example.test/") {
		t.Error("an approval for an hour is a standing grant")
	}
	evs := rec.kind(audit.KindApproval)
	if len(evs) != 2 || evs[0].Approval.Stage != "held" || evs[1].Approval.Stage != "approved" {
		t.Fatalf("events: %+v", evs)
	}
}

func TestFiledAccessRequestExpires(t *testing.T) {
	a := newApprovals(&recorder{}, 20*time.Millisecond, nil)
	ap := a.File("sb-1", "example.test:443", "")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if l := a.List(); len(l) == 1 && l[0].State == "expired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request did not expire: %+v", a.List())
		}
	}
	if _, err := a.Decide(ap.ID, client.Decision{Approve: true}, "bob"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("deciding an expired request: %v", err)
	}
}

// A backend without AccessBackend answers the routes "unsupported".
func TestAccessRoutesUnsupported(t *testing.T) {
	api := &API{Backend: accessless{}}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/policies/explain?request=GET+https://x.test/"},
		{"POST", "/v1/sandboxes/sb-1/access"},
		{"GET", "/v1/sandboxes/sb-1/report"},
	} {
		req, _ := http.NewRequestWithContext(context.Background(), r.method, srv.URL+r.path, strings.NewReader(`{"destination":"x.test"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s %s: status %d, want 501", r.method, r.path, resp.StatusCode)
		}
	}
}

type accessless struct{ Backend }
