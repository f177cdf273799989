package e2e

import (
	"context"
	"testing"
	"time"
)

// TestApplianceStartsForTheWorld starts `airlock serve` with the suite's
// config (upstream resolver = the world's DNS, lab allow-range = the
// world's prefix, extra CA = the world's) and the rendered e2e policy, and
// checks it is healthy and serves that policy. It needs no sandbox image.
func TestApplianceStartsForTheWorld(t *testing.T) {
	requireServe(t, false)
	w := startWorld(t)
	a := startAppliance(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pols, err := a.c.Policies(ctx)
	if err != nil {
		t.Fatalf("list policies: %v", err)
	}
	found := false
	for _, p := range pols {
		found = found || p.Name == PolicyName
	}
	if !found {
		t.Errorf("the appliance does not serve policy %q: %+v", PolicyName, pols)
	}
}
