package randid

import (
	"fmt"
	"regexp"
	"testing"
)

func TestHex(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range []int{1, 6, 8, 12} {
		re := regexp.MustCompile(fmt.Sprintf(`^[0-9a-f]{%d}$`, 2*n))
		for range 100 {
			id := Hex(n)
			if !re.MatchString(id) {
				t.Fatalf("Hex(%d) = %q", n, id)
			}
			if n >= 6 && seen[id] {
				t.Fatalf("Hex(%d) repeated %q", n, id)
			}
			seen[id] = true
		}
	}
}
