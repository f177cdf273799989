package runner

import (
	"slices"
	"testing"
)

// The capability sets cannot be widened from outside: each accessor hands
// out a copy, and a sandbox's spec is built from the runner's own set.
func TestCapSetsAreCopies(t *testing.T) {
	d := DefaultCaps()
	d[0] = "CAP_SYS_ADMIN"
	a := AllowedCapAdd()
	a[0] = "CAP_SYS_ADMIN"
	e := CAEnvVars()
	e[0] = "LD_PRELOAD"
	if slices.Contains(DefaultCaps(), "CAP_SYS_ADMIN") || slices.Contains(AllowedCapAdd(), "CAP_SYS_ADMIN") || slices.Contains(CAEnvVars(), "LD_PRELOAD") {
		t.Fatal("a caller's change reached the runner's sets")
	}
	if _, err := NormalizeCapAdd([]string{"SYS_ADMIN"}); err == nil {
		t.Error("SYS_ADMIN accepted in CapAdd")
	}
	if spec := BuildSpec(SpecInput{ID: "x"}); slices.Contains(spec.CapAdd, "CAP_SYS_ADMIN") {
		t.Errorf("spec caps %v", spec.CapAdd)
	}
}
