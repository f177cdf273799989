package serve

import "testing"

// The hint `airlock run` prints names the state directory unless it is the
// default one: without it the command looked in /var/lib/airlock and
// failed for any other state_dir (the quick start's).
func TestReportHint(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"/var/lib/airlock", "airlock report 3f2a"},
		{"/var/lib/airlock/", "airlock report 3f2a"},
		{"/tmp/airlock-quickstart.Ab12/state", "airlock report --state-dir /tmp/airlock-quickstart.Ab12/state 3f2a"},
		{"/srv/air lock/it's", `airlock report --state-dir '/srv/air lock/it'\''s' 3f2a`},
	} {
		if got := reportHint(tc.dir, "3f2a"); got != tc.want {
			t.Errorf("reportHint(%q) = %q, want %q", tc.dir, got, tc.want)
		}
	}
}
