package world

import (
	"context"
	"fmt"
	"os"
)

// startServers writes the CA and starts every server in the namespace.
func (w *World) startServers(ctx context.Context) error {
	ca, err := newTestCA(w.ID)
	if err != nil {
		return err
	}
	w.CAPEM = ca.pem
	w.CAFile = w.path("world-ca.pem")
	if err := os.WriteFile(w.CAFile, ca.pem, 0o644); err != nil {
		return fmt.Errorf("world: write ca: %w", err)
	}
	w.caPool = ca.pool
	if err := w.startCapture(); err != nil {
		return err
	}
	if err := w.startDNS(); err != nil {
		return err
	}
	if err := w.etcNetNS(); err != nil {
		return err
	}
	head, err := w.makeRepo(ctx)
	if err != nil {
		return err
	}
	w.GitHead = head
	sites, err := w.sites(ctx)
	if err != nil {
		return err
	}
	for _, s := range sites {
		if err := w.serveSite(ca, s); err != nil {
			return err
		}
	}
	return w.startCanary()
}

func (w *World) sites(ctx context.Context) ([]site, error) {
	npm, err := newNPMRegistry(w.URL(RoleNPM))
	if err != nil {
		return nil, err
	}
	py, err := newPyIndex()
	if err != nil {
		return nil, err
	}
	npmH, err := withGated(npm, w.URL(RoleNPM), GatedNPM, nil)
	if err != nil {
		return nil, err
	}
	pyH, err := withGated(py, w.URL(RolePyPI), nil, GatedPy)
	if err != nil {
		return nil, err
	}
	git, err := w.gitHandler(ctx)
	if err != nil {
		return nil, err
	}
	https := []uint16{443}
	return []site{
		{role: RoleNPM, handler: npmH, tlsPorts: https},
		{role: RolePyPI, handler: pyH, tlsPorts: https},
		{role: RoleGit, handler: git, tlsPorts: https},
		{role: RoleAPI, handler: w.apiHandler(), tlsPorts: https},
		{role: RoleHooks, handler: hooksHandler(), tlsPorts: https},
		{role: RoleEvil, handler: evilHandler(), tlsPorts: []uint16{443, 853, 8443}, plainPorts: []uint16{80, 8080}, conns: true},
	}, nil
}
