package serve

import (
	"context"
	"net/http"

	"airlock/client"
)

// NodeBackend is the part of the control API the CNI plugin (airlock-cni)
// drives on a node agent: attach, check, detach and garbage-collect pods,
// and the agent's readiness. A Backend without it answers "unsupported".
type NodeBackend interface {
	AttachPod(ctx context.Context, req client.PodAttachRequest) (client.Pod, error)
	CheckPod(ctx context.Context, id string) (client.Pod, error)
	DetachPod(ctx context.Context, id string) error
	Pods(ctx context.Context) ([]client.Pod, error)
	GCPods(ctx context.Context, req client.PodGCRequest) (client.PodGCResult, error)
	NodeStatus(ctx context.Context) client.NodeStatus
}

var _ NodeBackend = (*Appliance)(nil)

// nodeRoutes adds /pods and /node.
func (a *API) nodeRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("POST "+v+"/pods", a.node(a.attachPod))
	mux.HandleFunc("GET "+v+"/pods", a.node(a.listPods))
	mux.HandleFunc("POST "+v+"/pods/gc", a.node(a.gcPods))
	mux.HandleFunc("GET "+v+"/pods/{id}", a.node(a.checkPod))
	mux.HandleFunc("DELETE "+v+"/pods/{id}", a.node(a.detachPod))
	mux.HandleFunc("GET "+v+"/node", a.node(a.nodeStatus))
}

func (a *API) node(h func(NodeBackend, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return withBackend(a, "takes no CNI pods", h)
}

func (a *API) attachPod(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	var req client.PodAttachRequest
	if !a.decode(w, r, &req) {
		return
	}
	p, err := b.AttachPod(r.Context(), req)
	a.reply(w, r, p, err)
}

func (a *API) listPods(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	ps, err := b.Pods(r.Context())
	replyList(a, w, r, ps, err)
}

func (a *API) checkPod(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	p, err := b.CheckPod(r.Context(), r.PathValue("id"))
	a.reply(w, r, p, err)
}

func (a *API) detachPod(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	if err := b.DetachPod(r.Context(), r.PathValue("id")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) gcPods(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	var req client.PodGCRequest
	if !a.decode(w, r, &req) {
		return
	}
	res, err := b.GCPods(r.Context(), req)
	a.reply(w, r, res, err)
}

func (a *API) nodeStatus(b NodeBackend, w http.ResponseWriter, r *http.Request) {
	a.reply(w, r, b.NodeStatus(r.Context()), nil)
}
