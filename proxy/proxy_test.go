package proxy

import (
	"net/http"
	"strings"
	"testing"

	"airlock/audit"
)

func TestTransparentMITMAllowsAndLogs(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	resp, err := c.Get(e.url("docs.example.test", "/guide"))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, "origin GET docs.example.test") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "world test CA" {
		t.Fatal("client saw the origin's certificate: the connection was not inspected")
	}
	dec := e.ev.waitFor(t, "flow decision", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "decision" && ev.Flow.SNI == "docs.example.test"
	})
	if dec.Verdict != "allow" || dec.Category != "docs" || dec.Flow.Handling != "inspect" || dec.Sandbox != "sb1" {
		t.Errorf("decision event: %+v %+v", dec, dec.Flow)
	}
	e.ev.waitFor(t, "http event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.HTTP.Path == "/guide" && ev.HTTP.Status == 200 && ev.HTTP.FlowID == dec.ID
	})
	c.CloseIdleConnections()
	cl := e.ev.waitFor(t, "flow close", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "close" && ev.ID == dec.ID
	})
	if cl.Flow.BytesUp == 0 || cl.Flow.BytesDown == 0 || cl.Flow.Dialed == "" {
		t.Errorf("close record lacks bytes or dialed address: %+v", cl.Flow)
	}
}

func TestExplicitConnectMITM(t *testing.T) {
	e := newEnv(t)
	resp, err := e.explicitClient().Get(e.url("git.example.test", "/acme/app.git/info/refs?service=git-upload-pack"))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
}

func TestH2MITM(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), true)
	resp, err := c.Get(e.url("docs.example.test", "/h2"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("proto %s status %d", resp.Proto, resp.StatusCode)
	}
	resp, err = c.Get(e.url("docs.example.test", "/x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second h2 request: %d", resp.StatusCode)
	}
}
