package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

const ptpList = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[
 {"type":"ptp","ipam":{"type":"host-local","subnet":"198.18.4.0/24"}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}`

func TestChainAppendsOnce(t *testing.T) {
	out, err := chain([]byte(ptpList), "/run/airlock/airlock.sock", "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := chain(out, "/run/x.sock", "builds")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(again)
	if err != nil {
		t.Fatalf("the chained conflist does not load: %v\n%s", err, again)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if strings.Join(types, ",") != "ptp,portmap,airlock-cni" || list.Name != "k8s-pod-network" {
		t.Fatalf("plugins %v of %q, want ptp,portmap,airlock-cni of k8s-pod-network", types, list.Name)
	}
	var own map[string]any
	json.Unmarshal(list.Plugins[2].Bytes, &own)
	if own["socket"] != "/run/x.sock" || own["policy"] != "builds" {
		t.Fatalf("airlock-cni entry %v, want the second install's socket and policy", own)
	}
	if caps, _ := own["capabilities"].(map[string]any); caps[annotationsCap] != true {
		t.Fatalf("airlock-cni entry %v lacks the pod-annotations capability", own)
	}
}

func TestChainConvertsConf(t *testing.T) {
	out, err := chain([]byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge","bridge":"cni0"}`), "/s", "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(out)
	if err != nil || len(list.Plugins) != 2 || list.Plugins[0].Network.Type != "bridge" {
		t.Fatalf("converted .conf: %v %s", err, out)
	}
}

func TestChainErrors(t *testing.T) {
	cases := []struct{ name, in, msg string }{
		{"old version", `{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"ptp"}]}`, "needs 1.0.0"},
		{"no version", `{"name":"n","plugins":[{"type":"ptp"}]}`, "cniVersion"},
		{"empty plugins", `{"cniVersion":"1.0.0","name":"n","plugins":[]}`, "non-empty"},
		{"not cni", `{"cniVersion":"1.0.0","foo":1}`, "not a CNI configuration"},
		{"not json", `{`, "parse"},
		{"no name", `{"cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}`, `no "name"`},
		{"plugin without type", `{"cniVersion":"1.0.0","name":"n","plugins":[{}]}`, "plugins[0]"},
		{"type not a string", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":1}]}`, "not a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := chain([]byte(c.in), "/s", ""); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want one containing %q", err, c.msg)
			}
		})
	}
}

func TestInstallPicksMainConf(t *testing.T) {
	bin, conf := t.TempDir(), t.TempDir()
	for name, body := range map[string]string{"20-other.conflist": ptpList, "10-main.conflist": ptpList, "README": "x"} {
		os.WriteFile(filepath.Join(conf, name), []byte(body), 0o644)
	}
	if err := install(installOpts{binDir: bin, confDir: conf, socket: "/s"}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(bin, "airlock-cni"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("plugin binary: %v %v", st, err)
	}
	// Again: it must not chain onto its own file.
	if err := install(installOpts{binDir: bin, confDir: conf, socket: "/s"}); err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromFile(filepath.Join(conf, OwnConflist))
	if err != nil || len(list.Plugins) != 3 {
		t.Fatalf("installed conflist: %v, %d plugins", err, len(list.Plugins))
	}
	if err := install(installOpts{binDir: bin, confDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no CNI configuration") {
		t.Fatalf("install into an empty conf dir: %v", err)
	}
}

// FuzzChain: any configuration file gives a loadable conflist or an
// error, never a panic.
func FuzzChain(f *testing.F) {
	f.Add([]byte(ptpList))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"n","type":"bridge"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := chain(b, "/s", "")
		if err != nil {
			return
		}
		if _, err := libcni.ConfListFromBytes(out); err != nil {
			t.Fatalf("chain accepted %q but its output does not load: %v", b, err)
		}
	})
}
