package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"airlock/internal/randid"
)

// addMember makes one warm member: a container started with the agent as
// PID 1, its veth attached with no identity (SandboxNet.Unbound), no
// policy and no workspace. It is never handed a command before a claim.
func (r *Runner) addMember(ctx context.Context, w *warmPools, rs resolved) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	id := r.memberID()
	info := Sandbox{ID: id, Image: rs.image, Created: r.cfg.Now().UTC(), phase: phasePooled,
		ExecTimeout: r.cfg.ExecTimeout, ReadOnly: rs.spec.ReadOnlyRoot,
		Limits: limitReport(rs.spec.Limits, r.cgroups), Template: rs.tmpl}
	sb := &sandbox{info: info, warmKey: rs.key}
	req := CreateRequest{Image: rs.image, Limits: rs.spec.Limits, ReadOnlyRoot: rs.spec.ReadOnlyRoot}
	if err := r.makeMember(ctx, sb, req); err != nil {
		r.abort(sb)
		r.lifecycle(sb.info, "failed", "warm pool member: "+err.Error())
		return err
	}
	w.mu.Lock()
	w.idle[rs.key] = append(w.idle[rs.key], sb)
	w.mu.Unlock()
	r.lifecycle(sb.info, "pooled", fmt.Sprintf("warm pool member ready for %s; %s; network unbound: every packet is dropped until a claim",
		describeKey(rs.key), imageSummary(sb.info)))
	return nil
}

// memberID draws a member's id (tests number them).
func (r *Runner) memberID() string {
	if r.cfg.newMemberID != nil {
		return r.cfg.newMemberID()
	}
	return randid.Hex(6)
}

func (r *Runner) makeMember(ctx context.Context, sb *sandbox, req CreateRequest) error {
	id := sb.info.ID
	imageID, err := r.cfg.Engine.ImageID(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("image %s: %w", req.Image, err)
	}
	sb.info.ImageID = imageID
	in := SpecInput{ImageID: imageID, Template: sb.info.Template, Instance: r.cfg.Instance, ID: id, Req: req,
		Created: sb.info.Created, ExecTimeout: sb.info.ExecTimeout, Cgroups: r.cgroups, ProxyURL: r.cfg.ProxyURL,
		AgentDir: r.agentDir, Pool: sb.warmKey}
	if in.Address, err = r.pool.alloc(); err != nil {
		return err
	}
	sb.info.Address, sb.info.Gateway, in.Gateway = in.Address, r.pool.gw, r.pool.gw
	in.ResolvConf = r.resolvConf()
	if in.CABundle, err = r.caBundle(ctx, req.Image, imageID); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(r.sandboxesDir(), id), 0o700); err != nil {
		return err
	}
	r.register(sb)
	spec := BuildSpec(in)
	cid, err := r.cfg.Engine.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	r.update(sb, func(i *Sandbox) { i.ContainerID = cid })
	if err := r.cfg.Engine.Start(ctx, cid); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	if err := r.plumb(ctx, sb); err != nil {
		return err
	}
	r.connectAgent(ctx, sb, spec.Labels)
	if r.agentOf(id) == nil {
		return fmt.Errorf("its agent does not answer (%s): a member is only claimed through the agent", sb.info.AgentError)
	}
	return nil
}
