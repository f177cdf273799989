package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"airlock/internal/safefile"
)

func TestLimits(t *testing.T) {
	manyCats := func(n int) string {
		var b strings.Builder
		b.WriteString("version = 1\n")
		for i := range n {
			fmt.Fprintf(&b, "[categories.c%d]\nkind = \"public_web\"\nhosts = [\"h%d.example.test\"]\n", i, i)
		}
		return b.String()
	}
	manyHosts := func(n int) string {
		var b strings.Builder
		b.WriteString("version = 1\n[categories.a]\nhosts = [")
		for i := range n {
			fmt.Fprintf(&b, "\"h%d.example.test\",", i)
		}
		b.WriteString("]\n")
		return b.String()
	}
	for _, c := range []struct {
		name, src, want string
	}{
		{"categories", manyCats(MaxCategories + 1), "1025 categories: a policy holds at most 1024"},
		{"entries", manyHosts(MaxEntries + 1), "65537 hosts and cidrs entries"},
		{"string", "version = 1\ndescription = \"" + strings.Repeat("x", MaxString+1) + "\"\n", "description: a string or key of 4097 bytes"},
		{"host", "version = 1\n[categories.a]\nhosts = [\"" + strings.Repeat("a", MaxString+1) + ".test\"]\n", "categories.a.hosts[0]: a string or key of 4102 bytes"},
		{"size", "version = 1\n#" + strings.Repeat("x", MaxPolicySize) + "\n", "larger than 4 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("p.toml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	if _, err := Parse("p.toml", []byte(manyCats(MaxCategories))); err != nil {
		t.Errorf("%d categories: %v", MaxCategories, err)
	}
}

func TestLoadReadsOnlyRegularFilesInItsDirectory(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxPolicySize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]error{fifo: safefile.ErrNotRegular, zero: safefile.ErrOutsideDir, big: safefile.ErrTooLarge} {
		if _, err := Load(path); !errors.Is(err, want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s): %v, want %v naming the file", path, err, want)
		}
	}
}
