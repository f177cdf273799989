package pkgmeta

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"strings"
)

// The digests registry metadata gives, in Subresource Integrity form
// ("ALG-BASE64"): npm's dist.integrity (sha512) or dist.shasum (sha1,
// hex), PyPI's sha256 (hex).

func rank(alg string) int {
	switch alg {
	case "sha512":
		return 4
	case "sha384":
		return 3
	case "sha256":
		return 2
	case "sha1":
		return 1
	}
	return 0
}

func algOf(sri string) string {
	alg, _, _ := strings.Cut(sri, "-")
	return alg
}

// HexSRI turns a hex digest into SRI form, "" when it is not hex of the
// algorithm's size.
func HexSRI(alg, h string) string {
	b, err := hex.DecodeString(strings.TrimSpace(h))
	if err != nil {
		return ""
	}
	hh, err := NewHash(alg)
	if err != nil || len(b) != hh.Size() {
		return ""
	}
	return alg + "-" + base64.StdEncoding.EncodeToString(b)
}

// NewHash returns the hash of an SRI algorithm name.
func NewHash(alg string) (hash.Hash, error) {
	switch alg {
	case "sha512":
		return sha512.New(), nil
	case "sha384":
		return sha512.New384(), nil
	case "sha256":
		return sha256.New(), nil
	case "sha1":
		return sha1.New(), nil
	}
	return nil, errors.New("unknown digest algorithm " + alg)
}

// ParseSRI splits "ALG-BASE64" into the hash and the digest it must give.
func ParseSRI(sri string) (hash.Hash, []byte, error) {
	alg, b64, ok := strings.Cut(sri, "-")
	if !ok {
		return nil, nil, errors.New("not an integrity value: " + sri)
	}
	h, err := NewHash(alg)
	if err != nil {
		return nil, nil, err
	}
	want, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(want) != h.Size() {
		return nil, nil, errors.New("bad " + alg + " digest in " + sri)
	}
	return h, want, nil
}
