package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

// PodAttachRequest is what the CNI plugin (airlock-cni) asks of a node
// agent on ADD: steer the pod's host-side veth through the kernel path and
// register its address as a sandbox of kind "pod" under a policy.
type PodAttachRequest struct {
	// ContainerID and IfName are the CNI attachment's key.
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
	Netns       string `json:"netns,omitempty"`
	// HostIf is the host end of the pod's veth, as the main plugin named
	// it (the agent renames it into the guarded alk- prefix).
	HostIf string `json:"host_if"`
	// Address is the pod's IPv4 address; Gateway the host end's (its only
	// ARP target); MAC, when set, the only source MAC the pod may use.
	Address string `json:"address"`
	Gateway string `json:"gateway,omitempty"`
	MAC     string `json:"mac,omitempty"`
	// Policy names a loaded policy; empty means the node's default_policy.
	Policy string `json:"policy,omitempty"`
	// Namespace and Name are the pod's, when the runtime passed them.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// Pod is one CNI attachment the node agent enforces.
type Pod struct {
	ID          string `json:"id"`
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
	HostIf      string `json:"host_if"`
	Ifindex     int    `json:"ifindex"`
	Address     string `json:"address"`
	Policy      string `json:"policy"`
	PolicyHash  string `json:"policy_hash,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	Created     string `json:"created,omitempty"`
}

// PodKey names one CNI attachment.
type PodKey struct {
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
}

// PodGCRequest lists the attachments the runtime still has; the agent
// detaches every other pod (CNI GC).
type PodGCRequest struct {
	Valid []PodKey `json:"valid"`
}

// PodGCResult names the pods GC detached.
type PodGCResult struct {
	Removed []string `json:"removed"`
}

// NodeStatus says whether the agent can take pods (CNI STATUS).
type NodeStatus struct {
	Node          bool   `json:"node"`
	Ready         bool   `json:"ready"`
	Reason        string `json:"reason,omitempty"`
	Pods          int    `json:"pods"`
	DefaultPolicy string `json:"default_policy,omitempty"`
}

// PodID is the sandbox id of the attachment (containerID, ifName):
// "pod-" and 10 hex digits of a hash, short enough for an interface name.
func PodID(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifName))
	return "pod-" + hex.EncodeToString(sum[:5])
}

// PodIfName is the name the node agent gives the host end of pod id's
// veth: the guarded prefix "alk-" and the id's 10 hex digits (15 bytes,
// the most an interface name holds).
func PodIfName(id string) string {
	return "alk-" + strings.TrimPrefix(id, "pod-")
}

func podPath(id string) string { return "/pods/" + url.PathEscape(id) }

// AttachPod steers and registers a pod (CNI ADD). Attaching the same key
// again updates it.
func (c *Client) AttachPod(ctx context.Context, req PodAttachRequest) (Pod, error) {
	var p Pod
	return p, c.call(ctx, http.MethodPost, "/pods", req, &p)
}

// CheckPod verifies that a pod's path is attached (CNI CHECK); an error
// with CodeNotFound or CodeConflict says what is missing.
func (c *Client) CheckPod(ctx context.Context, id string) (Pod, error) {
	var p Pod
	return p, c.call(ctx, http.MethodGet, podPath(id), nil, &p)
}

// DetachPod detaches and forgets a pod (CNI DEL); an unknown id is no
// error.
func (c *Client) DetachPod(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, podPath(id), nil, nil)
}

// Pods lists the attached pods.
func (c *Client) Pods(ctx context.Context) ([]Pod, error) {
	var out []Pod
	return out, c.call(ctx, http.MethodGet, "/pods", nil, &out)
}

// GCPods detaches every pod not in req.Valid (CNI GC).
func (c *Client) GCPods(ctx context.Context, req PodGCRequest) (PodGCResult, error) {
	var out PodGCResult
	return out, c.call(ctx, http.MethodPost, "/pods/gc", req, &out)
}

// NodeStatus reports whether the agent runs in node mode and can take
// pods (CNI STATUS).
func (c *Client) NodeStatus(ctx context.Context) (NodeStatus, error) {
	var out NodeStatus
	return out, c.call(ctx, http.MethodGet, "/node", nil, &out)
}
