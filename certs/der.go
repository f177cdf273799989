package certs

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"math/big"
	"net/netip"
	"time"
)

// Leaves are minted from DER pieces computed once per CA: only the
// serial, validity, subject and subjectAltName differ between two leaves.
// x509.CreateCertificate re-encodes the whole template through reflection
// and verifies its own signature on every call, which is most of its cost;
// a leaf here is one signature over a handful of appended bytes, then
// parsed (which checks the encoding) before anyone sees it.

var (
	oidCN            = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtKeyUsage   = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidAuthKeyID     = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidSubjectAlt    = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidServerAuth    = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidECDSAWithSHA2 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
)

// leafTemplate holds the encoded parts every leaf of one CA shares.
type leafTemplate struct {
	version []byte // [0] EXPLICIT INTEGER 2
	sigAlg  []byte // AlgorithmIdentifier ecdsa-with-SHA256
	issuer  []byte // the CA's subject
	spki    []byte // the leaf key
	exts    []byte // key usage, extended key usage, authority key id
	key     *ecdsa.PrivateKey
	parent  *x509.Certificate
}

func newLeafTemplate(parent *x509.Certificate, caKey, leafKey *ecdsa.PrivateKey) (*leafTemplate, error) {
	spki, err := x509.MarshalPKIXPublicKey(&leafKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("certs: leaf template: %w", err)
	}
	sigAlg, _ := asn1.Marshal(pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA2})
	ku, _ := asn1.Marshal(asn1.BitString{Bytes: []byte{0x80}, BitLength: 1}) // digitalSignature
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{oidServerAuth})
	list := []pkix.Extension{
		{Id: oidKeyUsage, Critical: true, Value: ku},
		{Id: oidExtKeyUsage, Value: eku},
	}
	if len(parent.SubjectKeyId) > 0 {
		aki, _ := asn1.Marshal(struct {
			ID []byte `asn1:"optional,tag:0"`
		}{parent.SubjectKeyId})
		list = append(list, pkix.Extension{Id: oidAuthKeyID, Value: aki})
	}
	var exts []byte
	for _, e := range list {
		b, err := asn1.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("certs: leaf template: %w", err)
		}
		exts = append(exts, b...)
	}
	return &leafTemplate{
		version: []byte{0xa0, 0x03, 0x02, 0x01, 0x02},
		sigAlg:  sigAlg, issuer: parent.RawSubject, spki: spki, exts: exts,
		key: caKey, parent: parent,
	}, nil
}

// der encodes one tag-length-value with the parts as its content.
func der(tag byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n+6)
	out = append(out, tag)
	switch {
	case n < 0x80:
		out = append(out, byte(n))
	case n < 0x100:
		out = append(out, 0x81, byte(n))
	case n < 0x10000:
		out = append(out, 0x82, byte(n>>8), byte(n))
	default:
		out = append(out, 0x83, byte(n>>16), byte(n>>8), byte(n))
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// derTime is UTCTime through 2049 and GeneralizedTime after (RFC 5280).
func derTime(t time.Time) []byte {
	t = t.UTC()
	if y := t.Year(); y >= 1950 && y < 2050 {
		return der(0x17, []byte(t.Format("060102150405Z")))
	}
	return der(0x18, []byte(t.Format("20060102150405Z")))
}

func derInt(n *big.Int) []byte {
	b := n.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return der(0x02, b)
}

// sign returns the DER of a leaf for name (a DNS name or an IP literal,
// already validated) valid from notBefore to notAfter.
func (t *leafTemplate) sign(name string, serial *big.Int, notBefore, notAfter time.Time) ([]byte, error) {
	oid, _ := asn1.Marshal(oidCN)
	subject := der(0x30, der(0x31, der(0x30, oid, der(0x0c, []byte(name)))))
	var general []byte
	if ip, err := netip.ParseAddr(trimBrackets(name)); err == nil {
		general = der(0x87, ip.Unmap().AsSlice()) // iPAddress
	} else {
		general = der(0x82, []byte(name)) // dNSName
	}
	altOID, _ := asn1.Marshal(oidSubjectAlt)
	san := der(0x30, altOID, der(0x04, der(0x30, general)))
	tbs := der(0x30,
		t.version, derInt(serial), t.sigAlg, t.issuer,
		der(0x30, derTime(notBefore), derTime(notAfter)),
		subject, t.spki,
		der(0xa3, der(0x30, t.exts, san)),
	)
	sum := sha256.Sum256(tbs)
	sig, err := ecdsa.SignASN1(rand.Reader, t.key, sum[:])
	if err != nil {
		return nil, err
	}
	return der(0x30, tbs, t.sigAlg, der(0x03, []byte{0}, sig)), nil
}

func trimBrackets(s string) string {
	if len(s) > 1 && s[0] == '[' && s[len(s)-1] == ']' {
		return s[1 : len(s)-1]
	}
	return s
}
