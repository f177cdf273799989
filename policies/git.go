package policies

import (
	"errors"
	"strings"
)

// repoPattern is an "owner/repo" pattern; either part may be "*".
type repoPattern struct {
	owner, repo string
	rule        Rule
}

func parseRepoPattern(s string) (repoPattern, error) {
	owner, repo, ok := strings.Cut(s, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return repoPattern{}, errors.New("want \"owner/repo\" (either part may be \"*\")")
	}
	for _, part := range []string{owner, repo} {
		if part == "*" {
			continue
		}
		if strings.Contains(part, "*") {
			return repoPattern{}, errors.New("\"*\" must stand for a whole owner or repository name")
		}
		if part == "." || part == ".." || strings.ContainsAny(part, "%?#\\ ") {
			return repoPattern{}, errors.New("not a repository name")
		}
	}
	return repoPattern{owner: strings.ToLower(owner), repo: strings.ToLower(strings.TrimSuffix(repo, ".git"))}, nil
}

// repoOf returns the owner and repository a normalized request path is
// about: its first two segments, without a ".git" suffix, lower case. A
// segment holding an encoded separator is refused.
func repoOf(path string) (owner, repo string, ok bool) {
	rest := strings.TrimPrefix(path, "/")
	owner, rest, ok = strings.Cut(rest, "/")
	if !ok || owner == "" {
		return "", "", false
	}
	repo, _, _ = strings.Cut(rest, "/")
	if hasEncodedSep(owner) || hasEncodedSep(repo) {
		return "", "", false
	}
	owner = strings.ToLower(decodeAll(owner))
	repo = strings.TrimSuffix(strings.ToLower(decodeAll(repo)), ".git")
	if repo == "" || repo == "." || repo == ".." || owner == "." || owner == ".." ||
		strings.ContainsAny(owner+repo, "/\\") {
		return "", "", false
	}
	return owner, repo, true
}

func (rp *repoPattern) match(owner, repo string) bool {
	return (rp.owner == "*" || rp.owner == owner) && (rp.repo == "*" || rp.repo == repo)
}

// isReceivePack reports whether a request is part of a git push over smart
// HTTP, in any spelling: the service name anywhere in the path or query,
// after decoding every percent-escape, in any letter case.
func isReceivePack(path, query string) bool {
	return containsFoldDecoded(path, "receive-pack") || containsFoldDecoded(query, "receive-pack")
}

func containsFoldDecoded(s, sub string) bool {
	if strings.IndexByte(s, '%') >= 0 || strings.IndexByte(s, '+') >= 0 {
		s = strings.ReplaceAll(decodeAll(s), "+", " ")
	}
	return containsFold(s, sub)
}

// containsFold is an ASCII case-insensitive strings.Contains; sub is lower case.
func containsFold(s, sub string) bool {
	n := len(sub)
	for i := 0; i+n <= len(s); i++ {
		j := 0
		for ; j < n; j++ {
			c := s[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}
