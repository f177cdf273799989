package serve

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airlock/client"
	"airlock/internal/safefile"
	"airlock/preview"
)

// PreviewKeyFile holds the HMAC key of preview links and cookies, below
// the state dir (created 0600 on first start).
const PreviewKeyFile = "preview.key"

// startPreview opens the preview listener when [preview] is configured.
func (a *Appliance) startPreview(context.Context) error {
	pc := a.cfg.Preview
	if !pc.Listen.IsValid() {
		return nil
	}
	key, err := previewKey(filepath.Join(a.cfg.StateDir, PreviewKeyFile))
	if err != nil {
		return err
	}
	tcfg, err := a.previewTLS(pc)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", pc.Listen.String())
	if err != nil {
		return fmt.Errorf("preview.listen: %w", err)
	}
	m, err := preview.New(preview.Config{Host: pc.Host, Port: l.Addr().(*net.TCPAddr).Port, Key: key,
		Dial: a.dialPreview, Authenticate: a.previewBearer, Events: a.tap, Log: a.log.With("component", "preview"),
		DefaultTTL: pc.DefaultTTL.Duration, MaxTTL: pc.MaxTTL.Duration, Rate: pc.Rate, Burst: pc.Burst})
	if err != nil {
		l.Close()
		return err
	}
	a.previews = m
	srv := m.Server(tcfg, preview.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	a.wg.Add(2)
	go func() { defer a.wg.Done(); m.Run(ctx, a.sandboxAlive) }()
	go func() { defer a.wg.Done(); _ = srv.ServeTLS(preview.Listen(l, preview.Limits{}), "", "") }()
	a.onClose(func() error { cancel(); return srv.Close() })
	a.log.Info("preview listener", "addr", l.Addr().String(), "host", pc.Host)
	return nil
}

// previewKey reads the key file, creating it on first use.
func previewKey(path string) ([]byte, error) {
	b, err := safefile.ReadPrivate(path, 1024)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		_, _ = rand.Read(b)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("preview key: %w", err)
		}
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("preview key: %w", err)
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("preview key %s: %d bytes, want 32 (remove it to make a new one)", path, len(b))
	}
	return b, nil
}

// previewTLS is the configured certificate, or leaves minted from the
// appliance CA for preview hosts only (never a name a client makes up).
func (a *Appliance) previewTLS(pc PreviewConfig) (*tls.Config, error) {
	if pc.TLSCert != "" {
		c, _, err := configuredTLS(pc.TLSCert, pc.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("preview: %w", err)
		}
		return c, nil
	}
	if a.ca == nil {
		return nil, errors.New("preview: no certificate configured and no appliance CA")
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := strings.ToLower(hi.ServerName)
		label, ok := strings.CutSuffix(name, "."+pc.Host)
		if !ok || label == "" || strings.Contains(label, ".") {
			return nil, fmt.Errorf("preview: no certificate for %q (not ID.%s)", hi.ServerName, pc.Host)
		}
		return a.ca.Leaf(name)
	}}, nil
}

// dialPreview opens the upstream from inside the sandbox's netns.
func (a *Appliance) dialPreview(ctx context.Context, sandbox string, port uint16) (net.Conn, error) {
	pid, err := a.runner.InitPID(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return preview.DialNetns(ctx, pid, port)
}

func (a *Appliance) sandboxAlive(id string) bool {
	_, err := a.runner.Get(id)
	return err == nil
}

// previewBearer admits a control API principal's bearer token.
func (a *Appliance) previewBearer(tok string) (preview.Principal, bool) {
	s := a.principals.Load()
	if s == nil {
		return preview.Principal{}, false
	}
	p, ok := s.Current().Lookup(tok)
	if !ok {
		return preview.Principal{}, false
	}
	return preview.Principal{Name: p.Name, Admin: p.Admin()}, true
}

// Expose creates a preview of a sandbox port for the caller.
func (a *Appliance) Expose(ctx context.Context, id string, req client.ExposeRequest, by string) (client.Preview, error) {
	if a.previews == nil {
		return client.Preview{}, client.Errorf(client.CodeInvalid, "previews are off: configure [preview] in the appliance config")
	}
	if _, err := a.runner.InitPID(ctx, id); err != nil {
		return client.Preview{}, apiError(err)
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := parseDuration(req.TTL)
		if err != nil {
			return client.Preview{}, client.Errorf(client.CodeInvalid, "ttl: not a duration: %q", req.TTL)
		}
		ttl = d
	}
	p, links, err := a.previews.Create(preview.CreateRequest{Sandbox: id, Port: req.Port, TTL: ttl, To: req.To, Name: req.Name, By: by})
	if err != nil {
		return client.Preview{}, client.Errorf(client.CodeInvalid, "%v", err)
	}
	out := toClientPreview(p)
	out.Links = links
	return out, nil
}

// Previews lists a sandbox's live previews.
func (a *Appliance) Previews(_ context.Context, id string) ([]client.Preview, error) {
	out := []client.Preview{}
	if a.previews == nil {
		return out, nil
	}
	for _, p := range a.previews.List(id) {
		out = append(out, toClientPreview(p))
	}
	return out, nil
}

// Unexpose revokes a preview of a sandbox.
func (a *Appliance) Unexpose(_ context.Context, id, pv, by string) error {
	if a.previews == nil {
		return client.Errorf(client.CodeNotFound, "no preview %s: previews are off", pv)
	}
	if err := a.previews.Revoke(id, pv, by); err != nil {
		return client.Errorf(client.CodeNotFound, "%v", err)
	}
	return nil
}

func toClientPreview(p preview.Preview) client.Preview {
	return client.Preview{ID: p.ID, Sandbox: p.Sandbox, Port: int(p.Port), Name: p.Name, To: p.To, By: p.By,
		Created: p.Created, Expires: p.Expires, URL: p.URL}
}
