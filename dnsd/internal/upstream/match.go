package upstream

import (
	"errors"
	"strings"

	"github.com/miekg/dns"
)

// answers reports whether r is a response whose one question is (name,
// case aside, qtype, class IN).
func answers(r *dns.Msg, name string, qtype uint16) bool {
	return r.Response && len(r.Question) == 1 && r.Question[0].Qtype == qtype &&
		r.Question[0].Qclass == dns.ClassINET && strings.EqualFold(r.Question[0].Name, name)
}

// Check makes sure r answers the query q (same ID, a response, the same
// one question), for answers that come over TCP or TLS.
func Check(q, r *dns.Msg) error {
	switch {
	case r == nil:
		return errors.New("empty answer")
	case r.Id != q.Id || !r.Response:
		return errors.New("answer id mismatch")
	case len(q.Question) != 1 || !answers(r, q.Question[0].Name, q.Question[0].Qtype):
		return errors.New("answer for another question")
	}
	return nil
}
