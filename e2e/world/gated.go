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
