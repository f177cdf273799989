package pkgmeta

import (
	"strconv"
	"strings"
)

// CompareSemver orders npm versions (MAJOR.MINOR.PATCH[-PRE][+BUILD]);
// a pre-release sorts before its release. Parts that are not numbers
// compare as text.
func CompareSemver(a, b string) int {
	ca, pa := splitSemver(a)
	cb, pb := splitSemver(b)
	for i := 0; i < max(len(ca), len(cb)); i++ {
		if c := compareIdent(part(ca, i), part(cb, i)); c != 0 {
			return c
		}
	}
	switch {
	case pa == "" && pb == "":
		return 0
	case pa == "":
		return 1
	case pb == "":
		return -1
	}
	xa, xb := strings.Split(pa, "."), strings.Split(pb, ".")
	for i := 0; i < min(len(xa), len(xb)); i++ {
		if c := compareIdent(xa[i], xb[i]); c != 0 {
			return c
		}
	}
	return len(xa) - len(xb)
}

func part(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "0"
}

func splitSemver(v string) ([]string, string) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexByte(v, '+'); i >= 0 {
		v = v[:i]
	}
	core, pre, _ := strings.Cut(v, "-")
	return strings.Split(core, "."), pre
}

func isPrerelease(v string) bool {
	_, pre := splitSemver(v)
	return pre != ""
}

func compareIdent(x, y string) int {
	nx, ex := strconv.ParseUint(x, 10, 64)
	ny, ey := strconv.ParseUint(y, 10, 64)
	switch {
	case ex == nil && ey == nil:
		switch {
		case nx < ny:
			return -1
		case nx > ny:
			return 1
		}
		return 0
	case ex == nil:
		return -1 // numeric identifiers sort before text ones
	case ey == nil:
		return 1
	}
	return strings.Compare(x, y)
}
