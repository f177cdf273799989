package podman

import "testing"

// The words podman 4.3 (Debian 12) prints when its state lists running
// containers but the pause process and their conmons are gone; seen on this
// machine after a host killed the sandbox user's processes.
const staleOutput = `time="2026-12-02T00:02:56Z" level=warning msg="\"/\" is not a shared mount, this could cause issues or missing mounts with rootless containers"
time="2026-12-02T00:02:56Z" level=error msg="invalid internal status, try resetting the pause process with \"podman system migrate\": could not find any running process: no such process"
`

func TestStaleState(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      bool
	}{
		{"pause process gone", staleOutput, true},
		{"other failure", `Error: cannot re-exec process: operation not permitted`, false},
		{"no output", ``, false},
	} {
		if got := staleState([]byte(c.out)); got != c.want {
			t.Errorf("%s: staleState = %v, want %v", c.name, got, c.want)
		}
	}
	if got, want := lastLine([]byte(staleOutput)), `time="2026-12-02T00:02:56Z" level=error msg="invalid internal status, try resetting the pause process with \"podman system migrate\": could not find any running process: no such process"`; got != want {
		t.Errorf("lastLine = %q", got)
	}
	if got := lastLine(nil); got != "" {
		t.Errorf("lastLine(nil) = %q", got)
	}
}
