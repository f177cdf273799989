// Package deploy holds the cluster manifests (kubernetes/, nomad/); this
// test decodes every manifest strictly into the Kubernetes API types (an
// unknown or misspelt field fails), checks the references between them,
// and validates the configuration and policies they carry with the
// appliance's own loaders.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"airlock/policies"
	"airlock/serve"
)

const namespace = "airlock-system"

// objects is every manifest, by kind and name.
type objects struct {
	namespaces      map[string]*corev1.Namespace
	serviceAccounts map[string]*corev1.ServiceAccount
	configMaps      map[string]*corev1.ConfigMap
	roles           map[string]*rbacv1.Role
	roleBindings    map[string]*rbacv1.RoleBinding
	daemonSets      map[string]*appsv1.DaemonSet
}

func load(t *testing.T) objects {
	t.Helper()
	o := objects{map[string]*corev1.Namespace{}, map[string]*corev1.ServiceAccount{}, map[string]*corev1.ConfigMap{},
		map[string]*rbacv1.Role{}, map[string]*rbacv1.RoleBinding{}, map[string]*appsv1.DaemonSet{}}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in kubernetes/")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(b) {
			if err := o.add(doc); err != nil {
				t.Errorf("%s: document %d: %v", f, i+1, err)
			}
		}
	}
	return o
}

func splitYAML(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// add decodes doc strictly into the type its apiVersion and kind name.
func (o objects) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var meta *metav1.ObjectMeta
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		v := &corev1.Namespace{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.namespaces[v.Name] = v
	case "v1 ServiceAccount":
		v := &corev1.ServiceAccount{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.serviceAccounts[v.Name] = v
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.configMaps[v.Name] = v
	case "rbac.authorization.k8s.io/v1 Role":
		v := &rbacv1.Role{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.roles[v.Name] = v
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		v := &rbacv1.RoleBinding{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.roleBindings[v.Name] = v
	case "apps/v1 DaemonSet":
		v := &appsv1.DaemonSet{}
		err, meta = strict(doc, v), &v.ObjectMeta
		o.daemonSets[v.Name] = v
	default:
		return fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if meta.Name == "" {
		return fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	if tm.Kind != "Namespace" && meta.Namespace != namespace {
		return fmt.Errorf("%s %s: namespace %q, want %q", tm.Kind, meta.Name, meta.Namespace, namespace)
	}
	return nil
}

// strict decodes with unknown fields as errors (sigs.k8s.io/yaml goes
// through JSON with DisallowUnknownFields).
func strict(doc []byte, v any) error {
	return yaml.UnmarshalStrict(doc, v)
}

func TestManifestsDecodeStrictly(t *testing.T) {
	o := load(t)
	if len(o.daemonSets) != 1 || len(o.namespaces) != 1 || len(o.configMaps) != 2 {
		t.Fatalf("want one DaemonSet, one Namespace and two ConfigMaps; got %d, %d, %d",
			len(o.daemonSets), len(o.namespaces), len(o.configMaps))
	}
}

// TestStrictDecodeCatchesTypos proves the check can fail.
func TestStrictDecodeCatchesTypos(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n  namespace: airlock-system\nspec:\n  templat: {}\n")
	if err := (objects{daemonSets: map[string]*appsv1.DaemonSet{}}).add(doc); err == nil || !strings.Contains(err.Error(), "templat") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

func TestDaemonSet(t *testing.T) {
	o := load(t)
	ds := o.daemonSets["airlock-node"]
	if ds == nil {
		t.Fatal("no DaemonSet airlock-node")
	}
	spec := ds.Spec.Template.Spec
	sel, _ := metav1.LabelSelectorAsMap(ds.Spec.Selector)
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %q: the agent attaches to the node's veths", spec.HostNetwork, spec.DNSPolicy)
	}
	if o.serviceAccounts[spec.ServiceAccountName] == nil {
		t.Errorf("serviceAccountName %q is not defined", spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the agent needs no API token: automountServiceAccountToken must be false")
	}
	checkVolumes(t, o, spec)
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		checkContainer(t, c)
	}
	checkHostPaths(t, spec)
}

// allowedCaps is what the agent needs; TestDaemonSetCapabilities in
// cmd/airlock-cni runs the agent with exactly the DaemonSet's set.
var allowedCaps = []corev1.Capability{"NET_ADMIN", "BPF", "PERFMON", "NET_BIND_SERVICE"}

func checkContainer(t *testing.T, c corev1.Container) {
	if c.Image == "" || len(c.Command) == 0 {
		t.Errorf("container %s: image and command are required", c.Name)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Errorf("container %s: no securityContext.capabilities", c.Name)
		return
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("container %s is privileged", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: allowPrivilegeEscalation must be false", c.Name)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container %s drops %v, want ALL", c.Name, sc.Capabilities.Drop)
	}
	for _, a := range sc.Capabilities.Add {
		if !slices.Contains(allowedCaps, a) {
			t.Errorf("container %s adds %s, beyond what the agent needs (%v)", c.Name, a, allowedCaps)
		}
	}
}

// checkVolumes: every mount names a volume, every configMap volume names
// a ConfigMap, every subPath a key of it.
func checkVolumes(t *testing.T, o objects, spec corev1.PodSpec) {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		if v.ConfigMap != nil && o.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("volume %s: ConfigMap %s is not defined", v.Name, v.ConfigMap.Name)
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			v, ok := vols[m.Name]
			if !ok {
				t.Errorf("container %s mounts undefined volume %s", c.Name, m.Name)
				continue
			}
			if m.SubPath != "" && v.ConfigMap != nil {
				if _, ok := o.configMaps[v.ConfigMap.Name].Data[m.SubPath]; !ok {
					t.Errorf("container %s: subPath %s is no key of ConfigMap %s", c.Name, m.SubPath, v.ConfigMap.Name)
				}
			}
		}
	}
}

// checkHostPaths: the agent sees the node's bpffs, CNI directories and
// control socket directory.
func checkHostPaths(t *testing.T, spec corev1.PodSpec) {
	var paths []string
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			paths = append(paths, v.HostPath.Path)
		}
	}
	for _, want := range []string{"/sys/fs/bpf", "/opt/cni/bin", "/etc/cni/net.d", "/run/airlock", "/var/lib/airlock", "/proc/sys"} {
		if !slices.Contains(paths, want) {
			t.Errorf("no hostPath volume for %s (have %v)", want, paths)
		}
	}
}

func TestRBAC(t *testing.T) {
	o := load(t)
	for name, rb := range o.roleBindings {
		if rb.RoleRef.Kind != "Role" || o.roles[rb.RoleRef.Name] == nil {
			t.Errorf("RoleBinding %s refers to %s %s, which is not defined", name, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
	}
	for name, r := range o.roles {
		for _, rule := range r.Rules {
			if len(rule.ResourceNames) == 0 || slices.Contains(rule.Verbs, "*") {
				t.Errorf("Role %s: rule %+v is not limited to named resources and verbs", name, rule)
			}
		}
	}
}

// TestConfigMaps validates node.toml with `airlock serve`'s loader and
// each policy with the policy loader.
func TestConfigMaps(t *testing.T) {
	o := load(t)
	cfg := o.configMaps["airlock-node-config"]
	if cfg == nil {
		t.Fatal("no ConfigMap airlock-node-config")
	}
	if _, err := serve.Parse("node.toml", []byte(cfg.Data["node.toml"])); err != nil {
		t.Errorf("node.toml: %v", err)
	}
	pols := o.configMaps["airlock-policies"]
	if pols == nil || len(pols.Data) == 0 {
		t.Fatal("no policies in ConfigMap airlock-policies")
	}
	for name, body := range pols.Data {
		if !strings.HasSuffix(name, ".toml") {
			t.Errorf("policy key %s: policies are NAME.toml", name)
		}
		if _, err := policies.Parse(name, []byte(body)); err != nil {
			t.Errorf("policy %s: %v", name, err)
		}
	}
}

// TestNomad checks the Nomad files: the conflist loads with libcni and
// chains airlock-cni last, and the example job selects that network.
func TestNomad(t *testing.T) {
	list, err := libcni.ConfListFromFile("nomad/airlock.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if last := list.Plugins[len(list.Plugins)-1].Network.Type; last != "airlock-cni" {
		t.Errorf("the conflist's last plugin is %s, want airlock-cni", last)
	}
	for _, f := range []string{"nomad/airlock-node.nomad.hcl", "nomad/example-agent.nomad.hcl"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(b, []byte("{")) != bytes.Count(b, []byte("}")) {
			t.Errorf("%s: unbalanced braces", f)
		}
		if !bytes.Contains(b, []byte(`driver = "podman"`)) {
			t.Errorf("%s: not a podman driver job", f)
		}
	}
	job, _ := os.ReadFile("nomad/example-agent.nomad.hcl")
	if want := `mode = "cni/` + list.Name + `"`; !bytes.Contains(job, []byte(want)) {
		t.Errorf("the example job does not select the network: no %s", want)
	}
}
