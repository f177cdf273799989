//go:build !airlock_thin

package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// `report --html missing-dir/x.html` named its temporary file
// (".report-844301571"), not the path the user gave (users.md S10).
func TestReportWriteNamesTheUsersPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "x.html")
	err := writeFileAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, "<html>"); return err })
	if err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, path) || strings.Contains(msg, ".report-") {
		t.Errorf("error %q: want the path %s, not the temporary file", msg, path)
	}
}
