package world

import (
	"net/http"
	"strings"
	"time"

	"airlock/e2e/world/pkgreg"
)

// The package gate's packages: versions of controlled ages beside the
// world's own packages, served by the npm registry and the Python index
// for every path that names a "gate-" package. The e2e policy's
// registries category has min_release_age = "72h".
var (
	GatedNPM = []pkgreg.Package{
		{Name: "gate-demo", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * 24 * time.Hour},
			{Version: "1.1.0", Age: 10 * 24 * time.Hour}, {Version: "2.0.0", Age: time.Hour}}},
		{Name: "gate-mal", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * 24 * time.Hour}, {Version: "1.0.1", Age: 20 * 24 * time.Hour}}},
	}
	GatedPy = []pkgreg.Package{
		{Name: "gate-demo", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * 24 * time.Hour}, {Version: "2.0.0", Age: time.Hour}}},
	}
)

// withGated serves the gated packages' paths from a pkgreg registry and
// every other path from h.
func withGated(h http.Handler, baseURL string, npm, py []pkgreg.Package) (http.Handler, error) {
	reg, err := pkgreg.New(baseURL, npm, py)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/gate-") || strings.Contains(r.URL.Path, "/gate_") {
			reg.ServeHTTP(rw, r)
			return
		}
		h.ServeHTTP(rw, r)
	}), nil
}

// GatedAdvisoryID is the malicious-package advisory the e2e appliance
// loads ([packages] osv): it names gate-mal 1.0.1. A test fixture in the
// shape of the OpenSSF malicious-packages records.
const GatedAdvisoryID = "MAL-2026-0900"

// GatedAdvisory is its OSV record.
const GatedAdvisory = `{"schema_version": "1.5.0", "id": "MAL-2026-0900", "summary": "Malicious code in gate-mal (npm)",
 "affected": [{"package": {"ecosystem": "npm", "name": "gate-mal"}, "versions": ["1.0.1"]}]}
`
