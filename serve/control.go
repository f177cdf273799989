package serve

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
)

// controlAPI is the unix socket's API (its caller: the admin "local"),
// with the sandbox owners and refusal events every listener shares.
func (a *Appliance) controlAPI() (*API, error) {
	owners, err := newOwners(filepath.Join(a.cfg.StateDir, ownersFile))
	if err != nil {
		return nil, err
	}
	if a.registry != nil {
		a.registry.SetTenants(func(id string) string { p, _ := owners.Owner(id); return p })
	}
	sb := a.cfg.Sandbox
	return &API{Backend: a, Log: a.log.With("component", "api"), Owners: owners, Events: a.tap,
		Defaults: Defaults{Policy: a.cfg.DefaultPolicy, Image: sb.Image, Lifetime: sb.Lifetime.Duration,
			ExecTimeout: sb.ExecTimeout.Duration}}, nil
}

// listenControlTCP opens the TCP listener over TLS, its callers the
// principals (control.principals_file and control.token_file's "token").
func (a *Appliance) listenControlTCP(unix *API) (*http.Server, net.Listener, error) {
	c := a.cfg.Control
	tok := ""
	if c.TokenFile != "" {
		var err error
		if tok, err = ReadToken(c.TokenFile); err != nil {
			return nil, nil, err
		}
	}
	ps, err := newPrincipalStore(c.PrincipalsFile, tok, a.log.With("component", "principals"))
	if err != nil {
		return nil, nil, err
	}
	tcfg, fp, err := controlTLS(c, a.ca)
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", c.TCP.String())
	if err != nil {
		return nil, nil, fmt.Errorf("control tcp: %w", err)
	}
	a.principals.Store(ps)
	tapi := &API{Backend: unix.Backend, Log: unix.Log, Owners: unix.Owners, Events: unix.Events,
		Defaults: unix.Defaults, Principals: ps}
	src := "minted from the appliance CA (pin the CA's fingerprint)"
	if c.TLSCert != "" {
		src = c.TLSCert
	}
	a.log.Info("control API on TLS", "addr", l.Addr().String(), "certificate", src, "sha256_fingerprint", fp,
		"principals", ps.Current().Names())
	return NewHTTPServer(tapi.Handler()), tls.NewListener(l, tcfg), nil
}
