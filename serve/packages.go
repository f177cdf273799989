package serve

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"airlock/client"
	"airlock/policies"
)

// PackagesConfig is the [packages] section: OSV lists directories of OSV
// advisories (the MAL- records of a malicious-packages data set), read
// recursively (*.json) at start and on every reload.
type PackagesConfig struct {
	OSV   []string           `toml:"osv"`
	Cache PackageCacheConfig `toml:"cache"`
}

// advisories is the loaded denylist, swapped whole on reload; the proxy
// reads the current one on each request.
type advisories struct {
	dirs []string
	cur  atomic.Pointer[policies.Advisories]
	log  *slog.Logger
}

var _ interface{ Advisories() *policies.Advisories } = (*advisories)(nil)

// Advisories returns the current list (nil when none is configured).
func (a *advisories) Advisories() *policies.Advisories { return a.cur.Load() }

// load reads the directories. A list that does not load never replaces
// the running one (as a broken policy does not): the error is returned
// and the old list stays.
func (a *advisories) load() error {
	if len(a.dirs) == 0 {
		return nil
	}
	adv, err := policies.LoadOSV(a.dirs)
	if err != nil {
		return fmt.Errorf("packages.osv: %w", err)
	}
	a.cur.Store(adv)
	a.log.Info("malicious-package advisories loaded", "files", adv.Files(), "entries", adv.Len())
	return nil
}

// reloadAdvisories re-reads [packages] osv with the policies; a list
// that does not load is reported as rejected and the running one stays.
func (a *Appliance) reloadAdvisories(res *client.ReloadResult) {
	if a.advisory == nil || len(a.advisory.dirs) == 0 {
		return
	}
	if err := a.advisory.load(); err != nil {
		a.log.Error("malicious-package advisories rejected; the running list stays", "err", err)
		res.Rejected = append(res.Rejected, client.PolicyChange{Name: "packages.osv", Errors: strings.Split(err.Error(), "\n")})
	}
}
