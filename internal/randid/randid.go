// Package randid draws the random ids the appliance names things with
// (sandboxes, requests, approvals, flows, placeholders).
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes (crypto/rand) as 2n lowercase hex digits.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
