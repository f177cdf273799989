package certs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadNeverCreates: Load on a missing directory or an empty one is
// ErrNoCA and writes nothing; Create makes a CA once and then refuses.
func TestLoadNeverCreates(t *testing.T) {
	empty := t.TempDir()
	missing := filepath.Join(empty, "typo")
	for _, dir := range []string{missing, empty} {
		if _, err := Load(dir); !errors.Is(err, ErrNoCA) {
			t.Errorf("Load(%s) = %v, want ErrNoCA", dir, err)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("Load wrote %v", ents)
	}
	ca, err := Create(missing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(missing); !errors.Is(err, ErrCAExists) {
		t.Errorf("second Create = %v, want ErrCAExists", err)
	}
	got, err := Load(missing)
	if err != nil || !bytes.Equal(got.CertPEM(), ca.CertPEM()) {
		t.Errorf("Load after Create: %v", err)
	}
}
