package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"airlock/client"
)

// PolicyAnnotation is the pod annotation that names the pod's policy.
const PolicyAnnotation = "airlock/policy"

// annotationsCap is the CNI capability containerd and CRI-O use to pass a
// pod's annotations in runtimeConfig.
const annotationsCap = "io.kubernetes.cri.pod-annotations"

// netConf is the plugin's configuration in the conflist.
type netConf struct {
	types.PluginConf
	// Socket is the node agent's control socket (default
	// /run/airlock/airlock.sock).
	Socket string `json:"socket,omitempty"`
	// Policy is the network's policy when the pod names none.
	Policy string `json:"policy,omitempty"`
	// Timeout bounds each call to the agent (default "10s").
	Timeout       string `json:"timeout,omitempty"`
	RuntimeConfig struct {
		PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
	} `json:"runtimeConfig"`
}

// podArgs are the CNI_ARGS the plugin reads; others are ignored.
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
	AIRLOCK_POLICY    types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

func parseConf(stdin []byte) (*netConf, error) {
	c := &netConf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "airlock-cni: parse network configuration", err.Error())
	}
	if c.Socket == "" {
		c.Socket = client.DefaultSocket
	}
	if _, err := c.timeout(); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "airlock-cni: timeout", err.Error())
	}
	if c.RawPrevResult != nil {
		if err := version.ParsePrevResult(&c.PluginConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "airlock-cni: parse prevResult", err.Error())
		}
	}
	return c, nil
}

func (c *netConf) timeout() (time.Duration, error) {
	if c.Timeout == "" {
		return 10 * time.Second, nil
	}
	d, err := time.ParseDuration(c.Timeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as \"10s\"", c.Timeout)
	}
	return d, nil
}

func parseArgs(s string) (podArgs, error) {
	var a podArgs
	a.IgnoreUnknown = true
	if err := types.LoadArgs(s, &a); err != nil {
		return a, types.NewError(types.ErrInvalidEnvironmentVariables, "airlock-cni: CNI_ARGS", err.Error())
	}
	return a, nil
}

// policy picks the pod's policy: its annotation, then CNI_ARGS, then the
// network's; "" lets the node agent use its default_policy.
func (c *netConf) policy(a podArgs) string {
	if p := c.RuntimeConfig.PodAnnotations[PolicyAnnotation]; p != "" {
		return p
	}
	if p := string(a.AIRLOCK_POLICY); p != "" {
		return p
	}
	return c.Policy
}
