package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"airlock/internal/agentwire"
)

// user is a resolved exec user.
type user struct {
	uid, gid uint32
	groups   []uint32
	home     string
}

// lookupUser resolves "", a name, a uid or uid:gid (either part a name)
// against the sandbox's own /etc/passwd and /etc/group.
func lookupUser(spec string) (user, error) {
	if spec == "" {
		return user{uid: 0, gid: 0, groups: []uint32{}}, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	var u user
	var uname string
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		u.uid, u.gid = uint32(n), uint32(n)
		if e, ok := passwdBy(func(f []string) bool { return f[2] == name }); ok {
			uname, u.gid, u.home = e[0], atou(e[3]), e[5]
		}
	} else {
		e, ok := passwdBy(func(f []string) bool { return f[0] == name })
		if !ok {
			return user{}, errorf(agentwire.CodeNotFound, "user %q: no such user in the sandbox's /etc/passwd", name)
		}
		uname, u.uid, u.gid, u.home = e[0], atou(e[2]), atou(e[3]), e[5]
	}
	if hasGroup {
		if n, err := strconv.ParseUint(group, 10, 32); err == nil {
			u.gid = uint32(n)
		} else if g, ok := groupBy(func(f []string) bool { return f[0] == group }); ok {
			u.gid = atou(g[2])
		} else {
			return user{}, errorf(agentwire.CodeNotFound, "user %q: no such group %q in the sandbox's /etc/group", spec, group)
		}
	}
	u.groups = []uint32{}
	if uname != "" {
		scan("/etc/group", 4, func(f []string) bool {
			for _, m := range strings.Split(f[3], ",") {
				if m == uname {
					u.groups = append(u.groups, atou(f[2]))
				}
			}
			return false
		})
	}
	return u, nil
}

func atou(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

func passwdBy(match func([]string) bool) ([]string, bool) { return scan("/etc/passwd", 7, match) }
func groupBy(match func([]string) bool) ([]string, bool)  { return scan("/etc/group", 4, match) }

// scan returns the first colon-separated line of at least n fields that
// matches.
func scan(path string, n int, match func([]string) bool) ([]string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= n && match(fields) {
			return fields, true
		}
	}
	return nil, false
}
