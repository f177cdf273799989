package policies

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// The Python lockfiles in TOML: uv.lock and poetry.lock. Both list
// [[package]] tables with a name, a version and the digests of the
// artifacts (uv: sdist.hash and wheels[].hash; poetry: files[].hash, or
// [metadata.files] in lock-version 1). A package that is not from a
// registry (the project itself, a path, a git checkout, a URL) has no
// registry download to allow and is skipped.

// pyLockFile is one artifact of a locked package.
type pyLockFile struct {
	File string `toml:"file"` // poetry
	URL  string `toml:"url"`  // uv
	Hash string `toml:"hash"`
}

type pyLockPkg struct {
	Name    string         `toml:"name"`
	Version string         `toml:"version"`
	Source  map[string]any `toml:"source"` // uv: {registry = URL} | {editable|virtual|path|directory|git|url = …}; poetry: {type = …}
	Sdist   *pyLockFile    `toml:"sdist"`
	Wheels  []pyLockFile   `toml:"wheels"`
	Files   []pyLockFile   `toml:"files"`
}

type pyLockDoc struct {
	Version  *int        `toml:"version"` // uv
	Packages []pyLockPkg `toml:"package"`
	Metadata struct {
		LockVersion string                  `toml:"lock-version"`
		Files       map[string][]pyLockFile `toml:"files"` // poetry lock-version 1
	} `toml:"metadata"`
}

func (s *LockSet) parsePyTOML(kind, file string, data []byte) error {
	var doc pyLockDoc
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return tomlLockError(file, err)
	}
	switch {
	case kind == lockUV && (doc.Version == nil || *doc.Version != 1):
		return fmt.Errorf("%s:%d: want `version = 1` (the uv.lock format read)", file, lineOfTOMLKey(data, "version"))
	case kind == lockPoetry && !strings.HasPrefix(doc.Metadata.LockVersion, "1.") && !strings.HasPrefix(doc.Metadata.LockVersion, "2."):
		return fmt.Errorf("%s:%d: [metadata] lock-version %q: want 1.x or 2.x", file, lineOfTOMLKey(data, "lock-version"), doc.Metadata.LockVersion)
	}
	s.lockedBy("pypi", file)
	lines := packageLines(data)
	for i, p := range doc.Packages {
		line := 1
		if i < len(lines) {
			line = lines[i]
		}
		if !pyFromRegistry(p.Source) {
			continue
		}
		if !pyName(p.Name) || p.Version == "" || strings.ContainsAny(p.Version, " <>=!*,;") {
			return fmt.Errorf("%s:%d: [[package]] %q %q: want a name and a pinned version", file, line, p.Name, p.Version)
		}
		files := append(p.Files, p.Wheels...)
		if p.Sdist != nil {
			files = append(files, *p.Sdist)
		}
		if len(files) == 0 {
			files = doc.Metadata.Files[p.Name]
		}
		var digests []string
		for _, f := range files {
			sri, err := pyLockDigest(f.Hash)
			if err != nil {
				return fmt.Errorf("%s:%d: %s %s: %v", file, line, p.Name, p.Version, err)
			}
			digests = append(digests, sri)
		}
		if len(digests) == 0 {
			return fmt.Errorf("%s:%d: %s %s: no artifact hashes: a lockfile pins the artifact's digest", file, line, p.Name, p.Version)
		}
		s.add("pypi", p.Name, p.Version, digests)
	}
	return nil
}

// pyFromRegistry: the package comes from a package index (uv: source
// registry, poetry: no source or a "legacy" index), not from a path, a
// git checkout or a URL.
func pyFromRegistry(src map[string]any) bool {
	if len(src) == 0 {
		return true
	}
	if _, ok := src["registry"]; ok {
		return true
	}
	t, _ := src["type"].(string)
	return t == "legacy"
}

// pyName: a distribution name as PEP 508 allows.
func pyName(n string) bool {
	if n == "" || len(n) > 214 {
		return false
	}
	for i, r := range n {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(n)-1 || r != '-' && r != '_' && r != '.') {
			return false
		}
	}
	return true
}

// pyLockDigest turns "sha256:HEX" into its Subresource Integrity form.
func pyLockDigest(h string) (string, error) {
	alg, hx, ok := strings.Cut(h, ":")
	b, err := hex.DecodeString(hx)
	if !ok || err != nil || !digestSize(alg, len(b)) || alg == "sha1" {
		return "", fmt.Errorf("hash %q: want sha256:HEX (or sha384, sha512)", h)
	}
	return alg + "-" + base64.StdEncoding.EncodeToString(b), nil
}

// packageLines are the lines of the [[package]] headers, in order (the
// order of doc.Packages).
func packageLines(data []byte) []int {
	var out []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxLockfile)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[[") && strings.TrimSpace(strings.Trim(strings.SplitN(l, "#", 2)[0], "[] \t")) == "package" {
			out = append(out, n)
		}
	}
	return out
}

// lineOfTOMLKey is the line of the first line starting `key =` (1 when
// absent).
func lineOfTOMLKey(data []byte, key string) int {
	for n, l := range bytes.Split(data, []byte("\n")) {
		if k, _, ok := bytes.Cut(l, []byte("=")); ok && string(bytes.TrimSpace(k)) == key {
			return n + 1
		}
	}
	return 1
}

// tomlLine is the start of BurntSushi/toml's errors (parse and decode):
// "toml: line N (last key "K"): message".
var tomlLine = regexp.MustCompile(`^toml: line (\d+)(?: \(last key "([^"]*)"\))?: `)

// tomlLockError places a TOML error at its line: "FILE:LINE: KEY: message".
func tomlLockError(file string, err error) error {
	msg := err.Error()
	m := tomlLine.FindStringSubmatch(msg)
	if m == nil {
		return fmt.Errorf("%s: %s", file, strings.TrimPrefix(msg, "toml: "))
	}
	rest := msg[len(m[0]):]
	if m[2] != "" {
		rest = m[2] + ": " + rest
	}
	return fmt.Errorf("%s:%s: %s", file, m[1], rest)
}
