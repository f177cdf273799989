package main

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestPolicyPrecedence(t *testing.T) {
	cases := []struct {
		name, conf, args, want string
	}{
		{"node default", `{"cniVersion":"1.0.0","type":"airlock-cni"}`, "", ""},
		{"network", `{"cniVersion":"1.0.0","type":"airlock-cni","policy":"net"}`, "", "net"},
		{"cni args over network", `{"cniVersion":"1.0.0","type":"airlock-cni","policy":"net"}`, "IgnoreUnknown=1;AIRLOCK_POLICY=arg", "arg"},
		{"annotation over all", `{"cniVersion":"1.0.0","type":"airlock-cni","policy":"net",
			"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"airlock/policy":"ann","other":"x"}}}`, "AIRLOCK_POLICY=arg", "ann"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf, err := parseConf([]byte(c.conf))
			if err != nil {
				t.Fatal(err)
			}
			a, err := parseArgs(c.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := conf.policy(a); got != c.want {
				t.Errorf("policy = %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseConfErrors(t *testing.T) {
	cases := []struct {
		name, conf string
		code       uint
		msg        string
	}{
		{"not json", `{"cniVersion":`, types.ErrDecodingFailure, "parse network configuration"},
		{"bad timeout", `{"cniVersion":"1.0.0","timeout":"soon"}`, types.ErrInvalidNetworkConfig, `"soon"`},
		{"negative timeout", `{"cniVersion":"1.0.0","timeout":"-1s"}`, types.ErrInvalidNetworkConfig, "positive"},
		{"bad prevResult", `{"cniVersion":"1.0.0","prevResult":{"ips":[{"address":"x"}]}}`, types.ErrDecodingFailure, "prevResult"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseConf([]byte(c.conf))
			if cniCode(err) != c.code || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v (code %d), want code %d containing %q", err, cniCode(err), c.code, c.msg)
			}
		})
	}
}

func TestParseArgsError(t *testing.T) {
	if _, err := parseArgs("K8S_POD_NAME"); cniCode(err) != types.ErrInvalidEnvironmentVariables {
		t.Fatalf("malformed CNI_ARGS: %v, want code %d", err, types.ErrInvalidEnvironmentVariables)
	}
}

// FuzzParseConf: any configuration or CNI_ARGS gives a value or a CNI
// error, never a panic.
func FuzzParseConf(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","type":"airlock-cni","socket":"/run/x.sock","timeout":"3s"}`), "IgnoreUnknown=1;K8S_POD_NAME=a")
	f.Add([]byte(`{"cniVersion":"1.0.0","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"198.18.0.2/24","interface":0}]}}`), "")
	f.Fuzz(func(t *testing.T, conf []byte, args string) {
		if c, err := parseConf(conf); err == nil {
			_ = c.policy(podArgs{})
		} else if cniCode(err) == 0 {
			t.Fatalf("parseConf error without a CNI code: %v", err)
		}
		if _, err := parseArgs(args); err != nil && cniCode(err) == 0 {
			t.Fatalf("parseArgs error without a CNI code: %v", err)
		}
	})
}
