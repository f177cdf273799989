// Package e2e is Airlock's end-to-end proof: real clients (curl, git, npm,
// pip, python3) in real sandboxes, through the real appliance (`airlock
// serve` built from this tree), against the hermetic world of e2e/world.
//
// The package holds the data the tests run — the bypass attempts, the
// test policy and the probe script — so that they can be read, counted
// and checked without root; the tests themselves need root, Podman and the
// sandbox images, and skip with a printed reason when any is missing.
package e2e
