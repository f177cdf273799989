package policies

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"airlock/internal/tomlpos"
	"github.com/BurntSushi/toml"
)

// The Python lockfiles in TOML: uv.lock and poetry.lock. Both list
// [[package]] tables with a name, a version and the digests of the
// artifacts (uv: sdist.hash and wheels[].hash; poetry: files[].hash, or
// [metadata.files] in lock-version 1). A package that is not from a
// registry (the project itself, a path, a git checkout, a URL) has no
// registry download to allow and is skipped.
//
// BurntSushi/toml parses the file into a table (a syntax error is placed
// by tomlError, as the policy's are); pyLockReader then fills the typed
// structs below from it, key by key, and places a value of the wrong type
// at its own line with a tomlpos index. toml's decoding into the structs
// would stop there too, but it knows a key only by its name, so it gives
// every [[package]]'s key the line of the last package's.

// pyLockDoc is the part of a lockfile read.
type pyLockDoc struct {
	Version     any // uv: 1
	Packages    []pyLockPkg
	LockVersion string              // poetry: [metadata] lock-version
	Files       map[string][]string // poetry lock-version 1: [metadata.files], hashes by package name
}

// pyLockPkg is one [[package]] table.
type pyLockPkg struct {
	Path          string // its tomlpos path, package[i]
	Name, Version string
	FromRegistry  bool
	Hashes        []string // "sha256:HEX", of every artifact
}

func (s *LockSet) parsePyTOML(kind, file string, data []byte) error {
	if err := tomlNesting(file, data); err != nil {
		return err
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return tomlError(file, data, err)
	}
	r := &pyLockReader{file: file, src: data}
	doc, err := r.doc(tree)
	if err != nil {
		return err
	}
	switch {
	case kind == lockUV && doc.Version != int64(1):
		return r.errf("version", "want `version = 1` (the uv.lock format read)")
	case kind == lockPoetry && !strings.HasPrefix(doc.LockVersion, "1.") && !strings.HasPrefix(doc.LockVersion, "2."):
		return r.errf("metadata.lock-version", "[metadata] lock-version %q: want 1.x or 2.x", doc.LockVersion)
	}
	s.lockedBy("pypi", file)
	for _, p := range doc.Packages {
		if err := s.addPyPkg(r, doc, p); err != nil {
			return err
		}
	}
	return nil
}

// addPyPkg adds one registry package; errors are at its [[package]].
func (s *LockSet) addPyPkg(r *pyLockReader, doc *pyLockDoc, p pyLockPkg) error {
	if !p.FromRegistry {
		return nil
	}
	if !pyName(p.Name) || p.Version == "" || strings.ContainsAny(p.Version, " <>=!*,;") {
		return r.errf(p.Path, "[[package]] %q %q: want a name and a pinned version", p.Name, p.Version)
	}
	hashes := p.Hashes
	if len(hashes) == 0 {
		hashes = doc.Files[p.Name]
	}
	digests := make([]string, 0, len(hashes))
	for _, h := range hashes {
		sri, err := pyLockDigest(h)
		if err != nil {
			return r.errf(p.Path, "%s %s: %v", p.Name, p.Version, err)
		}
		digests = append(digests, sri)
	}
	if len(digests) == 0 {
		return r.errf(p.Path, "%s %s: no artifact hashes: a lockfile pins the artifact's digest", p.Name, p.Version)
	}
	s.add("pypi", p.Name, p.Version, digests)
	return nil
}

// pyLockReader fills a pyLockDoc from the parsed table. Keys it does not
// read are ignored: a lockfile holds much more than the allowed set.
type pyLockReader struct {
	file string
	src  []byte
	ix   *tomlpos.Index // scanned at the first error: a lockfile that reads needs no positions
}

// errf is an error at the line of path (or of its closest enclosing
// key written).
func (r *pyLockReader) errf(path, format string, args ...any) error {
	if r.ix == nil {
		r.ix = tomlpos.Scan(string(r.src))
	}
	return fmt.Errorf("%s:%d: %s", r.file, r.ix.Lookup(path).Line, fmt.Sprintf(format, args...))
}

// typeErr is a value of the wrong type at path, named as a decoder names
// its key (package.name, without the element's index: the line says
// which).
func (r *pyLockReader) typeErr(path, want string, v any) error {
	return r.errf(path, "%s: incompatible types: want %s, got %s", keyName(path), want, tomlType(v))
}

func (r *pyLockReader) doc(tree map[string]any) (*pyLockDoc, error) {
	doc := &pyLockDoc{Version: tree["version"]}
	meta, err := r.table(tree, "", "metadata")
	if err == nil {
		doc.LockVersion, err = r.str(meta, "metadata", "lock-version")
	}
	if err == nil {
		doc.Files, err = r.metadataFiles(meta)
	}
	if err != nil {
		return nil, err
	}
	pkgs, err := r.tables(tree, "", "package")
	if err != nil {
		return nil, err
	}
	for i, t := range pkgs {
		p, err := r.pkg(t, tomlpos.Elem("package", i))
		if err != nil {
			return nil, err
		}
		doc.Packages = append(doc.Packages, p)
	}
	return doc, nil
}

// metadataFiles reads poetry's [metadata.files]: NAME = [{file, hash}].
func (r *pyLockReader) metadataFiles(meta map[string]any) (map[string][]string, error) {
	files, err := r.table(meta, "metadata", "files")
	if err != nil || files == nil {
		return nil, err
	}
	out := make(map[string][]string, len(files))
	for _, name := range slices.Sorted(maps.Keys(files)) { // the first error, always the same
		arts, err := r.tables(files, "metadata.files", name)
		if err != nil {
			return nil, err
		}
		if out[name], err = r.hashes(arts, tomlpos.Join("metadata.files", name)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pkg reads the [[package]] table at path.
func (r *pyLockReader) pkg(t map[string]any, path string) (p pyLockPkg, err error) {
	p.Path = path
	if p.Name, err = r.str(t, path, "name"); err != nil {
		return p, err
	}
	if p.Version, err = r.str(t, path, "version"); err != nil {
		return p, err
	}
	src, err := r.table(t, path, "source")
	if err != nil {
		return p, err
	}
	p.FromRegistry = pyFromRegistry(src)
	for _, key := range []string{"files", "wheels"} { // poetry, uv
		arts, err := r.tables(t, path, key)
		if err != nil {
			return p, err
		}
		h, err := r.hashes(arts, tomlpos.Join(path, key))
		if err != nil {
			return p, err
		}
		p.Hashes = append(p.Hashes, h...)
	}
	sdist, err := r.table(t, path, "sdist") // uv
	if err != nil || sdist == nil {
		return p, err
	}
	h, err := r.str(sdist, tomlpos.Join(path, "sdist"), "hash")
	p.Hashes = append(p.Hashes, h)
	return p, err
}

// hashes are the hash keys of an array of artifacts at path.
func (r *pyLockReader) hashes(arts []map[string]any, path string) ([]string, error) {
	out := make([]string, 0, len(arts))
	for i, a := range arts {
		h, err := r.str(a, tomlpos.Elem(path, i), "hash")
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// str is the string at key of t ("" when absent); path is t's.
func (r *pyLockReader) str(t map[string]any, path, key string) (string, error) {
	v, ok := t[key]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", r.typeErr(tomlpos.Join(path, key), "a string", v)
	}
	return s, nil
}

// table is the table at key of t (nil when absent).
func (r *pyLockReader) table(t map[string]any, path, key string) (map[string]any, error) {
	v, ok := t[key]
	if !ok {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, r.typeErr(tomlpos.Join(path, key), "a table", v)
	}
	return m, nil
}

// tables is the array of tables at key of t ([[key]] or key = [{…}]; nil
// when absent).
func (r *pyLockReader) tables(t map[string]any, path, key string) ([]map[string]any, error) {
	v, ok := t[key]
	if !ok {
		return nil, nil
	}
	path = tomlpos.Join(path, key)
	items, ok := asList(v)
	if !ok {
		return nil, r.typeErr(path, "an array of tables", v)
	}
	out := make([]map[string]any, len(items))
	for i, it := range items {
		if out[i], ok = it.(map[string]any); !ok {
			return nil, r.typeErr(tomlpos.Elem(path, i), "a table", it)
		}
	}
	return out, nil
}

// keyName is a key path without its array indices: package[2].wheels[0].hash
// is package.wheels.hash.
func keyName(path string) string {
	var b strings.Builder
	inQuote := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '"':
			inQuote = !inQuote
		case c == '\\' && inQuote && i+1 < len(path):
			b.WriteByte(c)
			i++
			c = path[i]
		case c == '[' && !inQuote:
			for i < len(path) && path[i] != ']' {
				i++
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
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

// maxTOMLNesting bounds how deeply arrays and inline tables nest in a
// lockfile. The TOML decoder descends recursively: two million '[' (4 MB,
// within a lockfile's bound) overflowed its stack, a fatal error that no
// recover catches, and took the appliance down with every sandbox. Real
// lockfiles nest three deep.
const maxTOMLNesting = 128

// tomlNesting refuses, with its position, a document whose arrays and
// inline tables nest deeper than maxTOMLNesting. It skips strings and
// comments; anything else malformed is left to the decoder.
func tomlNesting(file string, data []byte) error {
	depth, line, col := 0, 1, 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		switch c {
		case '\n':
			line, col = line+1, 0
		case '#':
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			q := string(c)
			if i+2 < len(data) && data[i+1] == c && data[i+2] == c {
				q = strings.Repeat(q, 3)
			}
			for j := i + len(q); ; j++ {
				if j >= len(data) {
					return nil // unterminated: the decoder says where
				}
				if data[j] == '\n' {
					line, col = line+1, 0
				}
				if c == '"' && data[j] == '\\' {
					j++
					continue
				}
				if strings.HasPrefix(string(data[j:min(j+len(q), len(data))]), q) {
					i = j + len(q) - 1
					break
				}
			}
		case '[', '{':
			if depth++; depth > maxTOMLNesting {
				return ErrorList{{Pos: Position{File: file, Line: line, Col: col},
					Msg: fmt.Sprintf("arrays and inline tables nest more than %d deep here", maxTOMLNesting)}}
			}
		case ']', '}':
			depth = max(depth-1, 0)
		}
	}
	return nil
}
