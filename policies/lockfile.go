package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"airlock/internal/safefile"
	"airlock/internal/tomlpos"
)

// CodeNotInLockfile starts the reason of a package the lockfiles do not
// list.
const CodeNotInLockfile = "not_in_lockfile"

// maxLockfile bounds one lockfile.
const maxLockfile = 16 << 20

// LockSet is the packages a category's lockfiles allow: {ecosystem,
// name, version} with the digests the artifact must have. An ecosystem
// with no lockfile is not restricted by it.
type LockSet struct {
	pkgs   map[string]map[string][]string // "eco|name" (match form) -> version -> SRI digests
	ecos   map[string]string              // ecosystem -> the lockfile(s) that list it
	rule   Rule
	files  []string
	counts []int // how many entries each of files has
	added  int   // entries added so far (counts are its steps)
}

// Locks reports whether the set restricts the package's ecosystem.
func (s *LockSet) Locks(eco string) bool {
	if s == nil {
		return false
	}
	_, ok := s.ecos[eco]
	return ok
}

// Allows reports whether the lockfiles list pkg's version (a package of
// an ecosystem no lockfile names is allowed).
func (s *LockSet) Allows(pkg Package) bool {
	if !s.Locks(pkg.Ecosystem) {
		return true
	}
	_, ok := s.pkgs[pkg.Ecosystem+"|"+matchName(pkg.Ecosystem, pkg.Name)][pkg.Version]
	return ok
}

// Digests are the digests (Subresource Integrity form, "sha512-…") the
// lockfiles give for pkg's version: its artifact must match one.
func (s *LockSet) Digests(pkg Package) []string {
	if s == nil {
		return nil
	}
	return s.pkgs[pkg.Ecosystem+"|"+matchName(pkg.Ecosystem, pkg.Name)][pkg.Version]
}

// Check is the denial of pkg's version when the lockfiles do not list
// it, in a category of the given mode (would_deny in audit mode); denied
// is false when they list it.
func (s *LockSet) Check(pkg Package, mode Mode) (gv GateVerdict, denied bool) {
	if s.Allows(pkg) {
		return GateVerdict{}, false
	}
	return GateVerdict{Action: ActionDeny, Rule: s.rule, Code: CodeNotInLockfile, Reason: s.Reason(pkg)}.In(mode), true
}

// Rule is the lockfiles rule that denies what they do not list.
func (s *LockSet) Rule() Rule { return s.rule }

// Reason is the denial reason for pkg.
func (s *LockSet) Reason(pkg Package) string {
	return CodeNotInLockfile + ": " + pkg.Ecosystem + ":" + pkg.Name + "@" + pkg.Version + " is not in " + s.ecos[pkg.Ecosystem]
}

// lockedPathReason is the reason a sandbox's lockfiles deny a path the
// category reads neither as a package nor as registry metadata.
func (c *Category) lockedPathReason() string {
	return CodeNotInLockfile + ": path is not a package download or metadata request " + c.r.path + " recognizes; lockfiles deny the rest"
}

// Lock returns the category's lockfile set, nil when it has none.
func (c *Category) Lock() *LockSet {
	if c == nil {
		return nil
	}
	return c.r.lock
}

func (s *LockSet) add(eco, name, version string, digests []string) {
	s.added++
	key := eco + "|" + matchName(eco, name)
	if s.pkgs[key] == nil {
		s.pkgs[key] = map[string][]string{}
	}
	s.pkgs[key][version] = append(s.pkgs[key][version], digests...)
}

// MaxLockfiles bounds the lockfiles read together (a category's, or a
// sandbox's); maxRequirementLine bounds one requirement continued over
// lines with a backslash.
const (
	MaxLockfiles       = 64
	maxRequirementLine = 64 << 10
)

// lockedBy records that file locks eco (even when it lists nothing).
func (s *LockSet) lockedBy(eco, file string) {
	if cur, ok := s.ecos[eco]; !ok {
		s.ecos[eco] = file
	} else if !slices.Contains(strings.Split(cur, ", "), file) {
		s.ecos[eco] = cur + ", " + file
	}
}

// The lockfile formats read.
const (
	lockNPM          = "npm"          // package-lock.json, npm-shrinkwrap.json
	lockRequirements = "requirements" // requirements*.txt with --hash
	lockUV           = "uv"           // uv.lock
	lockPoetry       = "poetry"       // poetry.lock
)

// lockFormats names the formats read, for errors.
const lockFormats = "package-lock.json, npm-shrinkwrap.json, requirements*.txt with --hash, uv.lock, poetry.lock"

// parse reads one lockfile into the set, in the format its name says
// (see lockFormat). Errors name the file and line.
func (s *LockSet) parse(file string, data []byte) error {
	kind, err := lockKind(file)
	if err != nil {
		return err
	}
	return s.parseAs(kind, file, data)
}

func (s *LockSet) parseAs(kind, file string, data []byte) error {
	switch kind {
	case lockRequirements:
		return s.parseRequirements(file, data)
	case lockUV, lockPoetry:
		return s.parsePyTOML(kind, file, data)
	}
	return s.parseNPM(file, data)
}

// lockKind is the format a lockfile's name says.
func lockKind(file string) (string, error) {
	switch base := filepath.Base(file); {
	case base == "package-lock.json" || base == "npm-shrinkwrap.json":
		return lockNPM, nil
	case strings.HasSuffix(base, ".txt"):
		return lockRequirements, nil
	case base == "uv.lock":
		return lockUV, nil
	case base == "poetry.lock":
		return lockPoetry, nil
	}
	return "", fmt.Errorf("%s: not a lockfile Airlock reads (%s)", file, lockFormats)
}

// lockKindOf is the format of a lockfile given by content (at sandbox
// creation, where the name may be anything): its name when that says,
// else what its content is.
func lockKindOf(file string, data []byte) (string, error) {
	if kind, err := lockKind(file); err == nil {
		return kind, nil
	}
	head := bytes.TrimLeft(data[:min(len(data), 4096)], " \t\r\n\ufeff")
	switch {
	case bytes.HasPrefix(head, []byte("{")) && bytes.Contains(data, []byte(`"lockfileVersion"`)):
		return lockNPM, nil
	case bytes.Contains(data, []byte("[[package]]")) && bytes.Contains(data, []byte("lock-version")):
		return lockPoetry, nil
	case bytes.Contains(data, []byte("[[package]]")):
		return lockUV, nil
	case bytes.Contains(data, []byte("--hash=")):
		return lockRequirements, nil
	}
	return "", fmt.Errorf("%s: not a lockfile Airlock reads (%s): neither its name nor its content says which", file, lockFormats)
}

// Lockfile is a lockfile given by content, with the name it is known by
// (for the format, when the name says it, and for errors).
type Lockfile struct {
	Name string
	Data []byte
}

// ParseLockfiles turns lockfiles given at sandbox creation into the set
// they allow; rule is the rule its denials name. The format of each is
// told by its name, else by its content; an error names the file and the
// line.
func ParseLockfiles(files []Lockfile, rule Rule) (*LockSet, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if len(files) > MaxLockfiles {
		return nil, fmt.Errorf("%d lockfiles: at most %d are read together", len(files), MaxLockfiles)
	}
	set := &LockSet{pkgs: map[string]map[string][]string{}, ecos: map[string]string{}, rule: rule}
	for i, f := range files {
		if f.Name == "" || len(f.Name) > 256 || !utf8.ValidString(f.Name) || strings.ContainsFunc(f.Name, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return nil, fmt.Errorf("lockfile %d: want a name (1 to 256 printable characters), not %q", i+1, f.Name)
		}
		if len(f.Data) > maxLockfile {
			return nil, fmt.Errorf("%s: %d bytes: a lockfile is at most %d", f.Name, len(f.Data), maxLockfile)
		}
		kind, err := lockKindOf(f.Name, f.Data)
		if err == nil {
			err = set.parseAs(kind, f.Name, f.Data)
		}
		if err != nil {
			return nil, err
		}
		set.fileRead(f.Name)
	}
	return set, nil
}

// Files are the lockfiles the set was read from.
func (s *LockSet) Files() []string {
	if s == nil {
		return nil
	}
	return s.files
}

// Entries is how many package entries (a name at a version) each of
// Files has; a version two lockfiles list counts in both.
func (s *LockSet) Entries() []int {
	if s == nil {
		return nil
	}
	return s.counts
}

// fileRead records that file was read, with the versions it added.
func (s *LockSet) fileRead(file string) {
	done := 0
	for _, n := range s.counts {
		done += n
	}
	s.files = append(s.files, file)
	s.counts = append(s.counts, s.added-done)
}

// npmLockPkg is an entry of "packages" (lockfileVersion 2 and 3).
type npmLockPkg struct {
	Version   string `json:"version"`
	Integrity string `json:"integrity"`
	Link      bool   `json:"link"`
}

// npmLockEntry is an entry of "dependencies" (lockfileVersion 1).
type npmLockEntry struct {
	Version      string                  `json:"version"`
	Integrity    string                  `json:"integrity"`
	Dependencies map[string]npmLockEntry `json:"dependencies"`
}

func (s *LockSet) parseNPM(file string, data []byte) error {
	var doc struct {
		LockfileVersion int                     `json:"lockfileVersion"`
		Packages        map[string]npmLockPkg   `json:"packages"`
		Dependencies    map[string]npmLockEntry `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", jsonPlace(file, data, err), err)
	}
	if doc.LockfileVersion < 1 || doc.LockfileVersion > 3 {
		return fmt.Errorf("%s:%d: lockfileVersion %d: want 1, 2 or 3", file, lineOfKey(data, "lockfileVersion"), doc.LockfileVersion)
	}
	s.lockedBy("npm", file)
	if doc.Packages != nil {
		for p, e := range doc.Packages {
			i := strings.LastIndex(p, "node_modules/")
			if p == "" || e.Link || i < 0 {
				continue // the project itself, a workspace link
			}
			if err := s.npmEntry(file, data, p, p[i+len("node_modules/"):], e.Version, e.Integrity); err != nil {
				return err
			}
		}
		return nil
	}
	return s.npmV1(file, data, doc.Dependencies)
}

func (s *LockSet) npmV1(file string, data []byte, deps map[string]npmLockEntry) error {
	for name, e := range deps {
		if err := s.npmEntry(file, data, name, name, e.Version, e.Integrity); err != nil {
			return err
		}
		if err := s.npmV1(file, data, e.Dependencies); err != nil {
			return err
		}
	}
	return nil
}

// npmEntry adds one locked package; key is its key in the file (for
// the line of an error).
func (s *LockSet) npmEntry(file string, data []byte, key, name, version, integrity string) error {
	if !npmName(name) || version == "" {
		return fmt.Errorf("%s:%d: %q: want a package name and a version", file, lineOfKey(data, key), key)
	}
	var digests []string
	for f := range strings.FieldsSeq(integrity) {
		alg, b64, ok := strings.Cut(f, "-")
		if b, err := base64.StdEncoding.DecodeString(b64); !ok || err != nil || !digestSize(alg, len(b)) {
			return fmt.Errorf("%s:%d: %s: bad integrity %q", file, lineOfKey(data, key), name, f)
		}
		digests = append(digests, f)
	}
	s.add("npm", name, version, digests)
	return nil
}

func digestSize(alg string, n int) bool {
	switch alg {
	case "sha512":
		return n == 64
	case "sha384":
		return n == 48
	case "sha256":
		return n == 32
	case "sha1":
		return n == 20
	}
	return false
}

// parseRequirements reads a requirements file in pip's hash-checking
// form: every requirement pinned with == and given at least one
// --hash=sha256:HEX.
func (s *LockSet) parseRequirements(file string, data []byte) error {
	s.lockedBy("pypi", file)
	lines := bytes.Split(data, []byte("\n"))
	var joined strings.Builder
	for i := 0; i < len(lines); i++ {
		start := i + 1
		joined.Reset()
		part := strings.TrimRight(string(lines[i]), " \t\r")
		for strings.HasSuffix(part, "\\") && i+1 < len(lines) { // a continued line, joined once
			joined.WriteString(strings.TrimSuffix(part, "\\"))
			joined.WriteByte(' ')
			if joined.Len() > maxRequirementLine {
				return fmt.Errorf("%s:%d: a requirement continued over more than %d bytes", file, start, maxRequirementLine)
			}
			i++
			part = strings.TrimRight(string(lines[i]), " \t\r")
		}
		joined.WriteString(part)
		line := joined.String()
		if err := s.requirement(line); err != nil {
			return fmt.Errorf("%s:%d: %w", file, start, err)
		}
	}
	return nil
}

func (s *LockSet) requirement(line string) error {
	if j := strings.Index(line, " #"); j >= 0 || strings.HasPrefix(strings.TrimSpace(line), "#") {
		line = line[:max(j, 0)]
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	if strings.HasPrefix(f[0], "-") {
		switch opt, _, _ := strings.Cut(f[0], "="); opt {
		case "--index-url", "-i", "--extra-index-url", "--require-hashes", "--no-binary", "--only-binary", "--prefer-binary", "--trusted-host":
			return nil
		}
		// Named without its value: a URL there may carry a token, and
		// a kept lockfile's error reaches the appliance's log.
		opt, _, _ := strings.Cut(f[0], "=")
		return fmt.Errorf("%s: an option a lockfile cannot hold (want NAME==VERSION --hash=sha256:HEX)", opt)
	}
	spec, _, _ := strings.Cut(f[0], ";")
	name, version, ok := strings.Cut(spec, "==")
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	if !ok || name == "" || version == "" || strings.ContainsAny(version, "<>=!*,") {
		req, _, _ := strings.Cut(f[0], "@") // a direct reference's URL may carry a token
		return fmt.Errorf("%q: not pinned: want NAME==VERSION", req)
	}
	var digests []string
	for _, h := range f[1:] {
		hex64, isHash := strings.CutPrefix(h, "--hash=sha256:")
		if !isHash {
			if strings.HasPrefix(h, "--hash=") {
				return fmt.Errorf("%q: only sha256 hashes are read", h)
			}
			continue // an environment marker's words
		}
		b, err := hex.DecodeString(hex64)
		if err != nil || len(b) != 32 {
			return fmt.Errorf("%q: not a sha256 digest", h)
		}
		digests = append(digests, "sha256-"+base64.StdEncoding.EncodeToString(b))
	}
	if len(digests) == 0 {
		return fmt.Errorf("%s: no --hash=sha256:…: a lockfile pins the artifact's digest", name)
	}
	s.add("pypi", name, version, digests)
	return nil
}

// lockfiles reads a registries category's lockfiles (paths relative to
// the policy file's directory, or absolute).
func (l *loader) lockfiles(c *Category, w *strs) {
	list, paths, present := w.vals, w.paths, w.set
	if !present {
		return
	}
	key := tomlpos.Join(c.r.path, "lockfiles")
	if len(list) == 0 {
		l.errf(key, "empty: list the lockfiles, or remove the key")
		return
	}
	set := &LockSet{pkgs: map[string]map[string][]string{}, ecos: map[string]string{}, rule: l.rule(key)}
	for i, f := range list {
		_, err := lockKind(f)
		var data []byte
		if err == nil {
			data, err = readLockfile(filepath.Dir(l.file), f)
		}
		if err == nil {
			err = set.parse(f, data)
		}
		if err != nil {
			l.errf(paths[i], "%v", err)
			continue
		}
		set.fileRead(f)
		sum := sha256.Sum256(data)
		l.lockSums = append(append(append(l.lockSums, f...), 0), sum[:]...)
	}
	c.r.lock = set
	if c.r.unrecognized == "" {
		c.r.pkgRule = set.rule
		c.r.unrecognized = "path is not a package download or metadata request " + c.r.path +
			" recognizes; a category with lockfiles denies the rest"
	}
}

func readLockfile(dir, f string) ([]byte, error) {
	if filepath.IsAbs(f) {
		return safefile.Read(f, maxLockfile)
	}
	if f == "" || strings.Contains(f, "..") {
		return nil, errors.New("a lockfile path must be inside the policy's directory")
	}
	return safefile.ReadIn(dir, f, maxLockfile)
}
