package client

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateGitURL(t *testing.T) {
	ok := []string{
		"https://git.example.test/org/repo.git",
		"https://git.example.test:8443/org/repo",
		"https://[2001:db8::1]/repo.git",
	}
	for _, u := range ok {
		if err := ValidateGitURL(u); err != nil {
			t.Errorf("ValidateGitURL(%q) = %v, want ok", u, err)
		}
	}
	bad := map[string]struct{ url, why string }{
		"empty":      {"", "empty"},
		"http":       {"http://git.example.test/org/repo.git", "only https"},
		"ssh":        {"ssh://git@git.example.test/org/repo.git", "only https"},
		"scp-like":   {"git@git.example.test:org/repo.git", "only https"},
		"file":       {"file:///srv/repo.git", "only https"},
		"option":     {"--upload-pack=touch /tmp/x", "space"},
		"user":       {"https://user@git.example.test/org/repo.git", "credentials"},
		"user:pass":  {"https://user:s3cret@git.example.test/org/repo.git", "credentials"},
		"query":      {"https://git.example.test/org/repo.git?private_token=s3cret", "query"},
		"fragment":   {"https://git.example.test/org/repo.git#main", "fragment"},
		"no host":    {"https:///org/repo.git", "no host"},
		"no repo":    {"https://git.example.test/", "no repository"},
		"newline":    {"https://git.example.test/org/repo.git\n--config=x", "control"},
		"upper case": {"HTTPS://git.example.test/org/repo.git", "only https"},
		"too long":   {"https://git.example.test/" + strings.Repeat("a", maxGitURL), "longer"},
	}
	for name, c := range bad {
		err := ValidateGitURL(c.url)
		var ae *Error
		if !errors.As(err, &ae) || ae.Code != CodeInvalid {
			t.Errorf("%s: ValidateGitURL(%q) = %v, want an invalid-request error", name, c.url, err)
			continue
		}
		if !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %q does not say %q", name, err, c.why)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error echoes the credential: %v", name, err)
		}
	}
}

func TestGitCloneArgv(t *testing.T) {
	got := strings.Join(GitCloneArgv("https://git.example.test/r.git"), " ")
	if want := "git clone --depth 1 -- https://git.example.test/r.git /workspace"; got != want {
		t.Errorf("argv %q, want %q", got, want)
	}
}
