package pkgmeta

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// packument200 is a full packument of 200 versions, each with the
// fields a real one carries (dist, dependencies, scripts, maintainers).
func packument200(tb testing.TB) []byte {
	versions, times := map[string]any{}, map[string]string{}
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 200 {
		v := fmt.Sprintf("1.%d.%d", i/10, i%10)
		versions[v] = map[string]any{"name": "big", "version": v, "description": "a package with many versions",
			"main": "index.js", "license": "MIT", "scripts": map[string]string{"test": "node test.js"},
			"dependencies": map[string]string{"a": "^1.0.0", "b": "~2.3.0", "c": "*"},
			"maintainers":  []map[string]string{{"name": "someone", "email": "someone@example.test"}},
			"dist": map[string]any{"tarball": "https://registry.example.test/big/-/big-" + v + ".tgz", "shasum": "0123456789abcdef0123456789abcdef01234567",
				"integrity": "sha512-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="}}
		times[v] = base.Add(time.Duration(i) * 24 * time.Hour).Format(time.RFC3339)
	}
	b, err := json.Marshal(map[string]any{"name": "big", "dist-tags": map[string]string{"latest": "1.19.9"}, "versions": versions, "time": times})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkGateNPM200 is the work the gate adds to a packument of 200
// versions: read the versions and times, and rewrite it without the
// newest ten.
func BenchmarkGateNPM200(b *testing.B) {
	doc := packument200(b)
	hidden := map[string]bool{}
	for i := 190; i < 200; i++ {
		hidden[fmt.Sprintf("1.%d.%d", i/10, i%10)] = true
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NPMVersions(doc); err != nil {
			b.Fatal(err)
		}
		if _, err := RewriteNPM(doc, hidden); err != nil {
			b.Fatal(err)
		}
	}
}
