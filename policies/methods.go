package policies

import "errors"

// methodSet is a set of HTTP methods, checked without allocating.
type methodSet struct {
	any   bool
	bits  uint16
	other []string
}

var stdMethods = [...]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

func (ms *methodSet) add(m string) error {
	if m == "*" {
		ms.any = true
		return nil
	}
	if m == "" {
		return errors.New("empty method")
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c >= 'a' && c <= 'z' {
			return errors.New("methods are case-sensitive and written in upper case")
		}
		if !(c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return errors.New("not an HTTP method")
		}
	}
	for i, s := range stdMethods {
		if s == m {
			ms.bits |= 1 << i
			return nil
		}
	}
	ms.other = append(ms.other, m)
	return nil
}

func (ms *methodSet) has(m string) bool {
	if ms.any {
		return true
	}
	for i, s := range stdMethods {
		if s == m {
			return ms.bits&(1<<i) != 0
		}
	}
	for _, s := range ms.other {
		if s == m {
			return true
		}
	}
	return false
}
