package preview

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Token kinds: a one-time link token ("t") is never accepted as a cookie
// ("c") and the other way round.
const (
	kindLink   = "t"
	kindCookie = "c"
)

// claim is what a token or cookie says: which preview, for whom, until
// when; Nonce makes each link token single-use.
type claim struct {
	Kind      string
	Preview   string
	Principal string
	Expires   time.Time
	Nonce     string
}

var b64 = base64.RawURLEncoding

// sign encodes c as payload "." mac with key.
func sign(key []byte, c claim) string {
	p := strings.Join([]string{"v1", c.Kind, c.Preview, c.Principal, strconv.FormatInt(c.Expires.Unix(), 10), c.Nonce}, "|")
	return b64.EncodeToString([]byte(p)) + "." + b64.EncodeToString(mac(key, p))
}

func mac(key []byte, p string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(p))
	return h.Sum(nil)
}

// Reasons a token is refused (each named in the refused event).
var (
	errTokenMalformed = errors.New("malformed token")
	errTokenForged    = errors.New("token signature does not match")
	errTokenExpired   = errors.New("token expired")
	errTokenKind      = errors.New("token of the wrong kind")
	errTokenPreview   = errors.New("token of another preview")
	errTokenUsed      = errors.New("token already used")
)

// verify checks s's signature, kind, preview and expiry at now.
func verify(key []byte, s, kind, preview string, now time.Time) (claim, error) {
	if len(s) > 1024 {
		return claim{}, errTokenMalformed
	}
	ps, ms, ok := strings.Cut(s, ".")
	if !ok {
		return claim{}, errTokenMalformed
	}
	pb, err1 := b64.DecodeString(ps)
	mb, err2 := b64.DecodeString(ms)
	// Go's base64 skips CR and LF: only the canonical spelling of a token
	// is that token (no variants of one link or cookie).
	if err1 != nil || err2 != nil || b64.EncodeToString(pb) != ps || b64.EncodeToString(mb) != ms {
		return claim{}, errTokenMalformed
	}
	if !hmac.Equal(mb, mac(key, string(pb))) {
		return claim{}, errTokenForged
	}
	c, err := parseClaim(string(pb))
	if err != nil {
		return claim{}, err
	}
	switch {
	case c.Kind != kind:
		return claim{}, errTokenKind
	case c.Preview != preview:
		return claim{}, errTokenPreview
	case !now.Before(c.Expires):
		return claim{}, errTokenExpired
	}
	return c, nil
}

func parseClaim(p string) (claim, error) {
	f := strings.Split(p, "|")
	if len(f) != 6 || f[0] != "v1" {
		return claim{}, errTokenMalformed
	}
	exp, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return claim{}, fmt.Errorf("%w: expiry %q", errTokenMalformed, f[4])
	}
	return claim{Kind: f[1], Preview: f[2], Principal: f[3], Expires: time.Unix(exp, 0), Nonce: f[5]}, nil
}

func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
