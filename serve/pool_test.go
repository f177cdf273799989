package serve

import (
	"strings"
	"testing"
	"time"

	"airlock/runner"
)

func TestPoolConfig(t *testing.T) {
	c, err := Parse("p.toml", []byte(minimal+`[pool]
images = { "localhost/airlock/busybox:1" = 2 }
templates = { py = 1, "go:v3" = 0 }
max_age = "10m"
`))
	if err != nil {
		t.Fatal(err)
	}
	w := c.Pool.warmConfig()
	want := []runner.WarmSpec{{Image: "localhost/airlock/busybox:1", Size: 2}, {Template: "py", Size: 1}}
	if len(w.Pools) != 2 || w.Pools[0] != want[0] || w.Pools[1] != want[1] || w.MaxAge != 10*time.Minute {
		t.Fatalf("warm config %+v", w)
	}
	for name, tc := range map[string]struct{ src, want string }{
		"typo":           {"[pool]\nimagez = { a = 1 }\n", `p.toml:8:1: unknown key "pool.imagez" (did you mean "pool.images"?)`},
		"not a number":   {"[pool]\nimages = { a = \"two\" }\n", "p.toml:8"},
		"too big":        {"[pool]\nimages = { a = 257 }\n", `pool.images: "a" = 257: a pool's size is 0 to 256`},
		"does not fit":   {"[sandbox]\nmax = 250\n[pool]\nimages = { a = 10 }\n", "do not fit network.pool (253 addresses)"},
		"negative bound": {"[pool]\nmax_total = -1\n", "pool.max_total must not be negative"},
	} {
		_, err := Parse("p.toml", []byte(minimal+tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
