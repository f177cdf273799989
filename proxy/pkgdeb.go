package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"

	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// Debian: a .deb's digest is the SHA256 its Packages index gives for
// its Filename. With the package cache on, the gate reads each Packages
// index a sandbox fetches through a registries category (passing it on
// unchanged: apt checks it against the signed Release, so it cannot be
// rewritten), parsing it as it passes, and remembers those digests for
// that repository (host and archive root); a later download of a listed
// .deb from the same repository is checked against its digest before its
// last byte and cached only then. A .deb whose index the appliance has not seen (apt's lists
// came with the image) passes unchecked and uncached, as apt checks it
// itself. Debian indices give no publish time: in a category with
// min_release_age, unknown_release_age decides every .deb.

const (
	maxDebIndex   = 64 << 20  // a Packages index read, compressed
	maxDebIndexUn = 512 << 20 // and uncompressed
	maxDebDigests = 1 << 20   // .deb digests remembered; when full, it starts over; an index listing more is refused
	// maxDebDigestBytes bounds the bytes the remembered digests hold
	// (repository, Filename and digest of each), as maxDebDigests bounds
	// their number: when full it starts over, and an index needing more
	// is refused.
	maxDebDigestBytes = 128 << 20
	// maxDebName bounds a Filename (and an archive root) the gate
	// remembers: a real pool path is under 300 bytes; a longer one stays
	// unknown, so a hostile index cannot fill memory with names.
	maxDebName = 1024
	// maxDebParses Packages indices are parsed at once; another passes on
	// unread (its .debs stay unknown, as for an index not seen).
	maxDebParses = 4
)

var (
	errDebTooMany  = errors.New("too many .debs")
	errDebTooLarge = fmt.Errorf("over %d bytes compressed", maxDebIndex)
	errDebCut      = errors.New("the body ended before its end")
)

// debDigests are the digests Packages indices gave, by repository (see
// debRepo) and Filename (pool/…): a .deb is checked only against what
// its own repository's indices said, so another repository on the same
// host (a user's, where users publish) cannot change them.
type debDigests struct {
	mu    sync.Mutex
	m     map[string]string
	bytes int // of the keys and values in m
	max   int // 0: maxDebDigests
}

func (d *debDigests) limit() int {
	if d.max > 0 {
		return d.max
	}
	return maxDebDigests
}

// debFile is a .deb an index lists: its Filename and digest.
type debFile struct{ name, sri string }

// size is what one remembered digest holds.
func (f debFile) size(repo string) int { return len(repo) + 1 + len(f.name) + len(f.sri) }

// put remembers an index's digests. Full (by number or bytes), the
// memory starts over, every repository's digests with it: their .debs are
// unknown until their indices are fetched again.
// An index fetched again replaces its own entries: only what is new
// counts toward the bounds. It says whether remembered digests were
// dropped.
func (d *debDigests) put(repo string, files []debFile) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	newN, newBytes := 0, 0
	for _, f := range files {
		if old, ok := d.m[repo+"|"+f.name]; ok {
			newBytes += len(f.sri) - len(old)
			continue
		}
		newN++
		newBytes += f.size(repo)
	}
	dropped := len(d.m) > 0
	reset := d.m == nil || len(d.m)+newN > d.limit() || d.bytes+newBytes > maxDebDigestBytes
	if reset {
		d.m, d.bytes = make(map[string]string, len(files)), 0
		for _, f := range files {
			d.bytes += f.size(repo)
		}
	} else {
		d.bytes += newBytes
	}
	for _, f := range files {
		d.m[repo+"|"+f.name] = f.sri
	}
	return reset && dropped
}

func (d *debDigests) get(repo, filename string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[repo+"|"+filename]
}

// debRepo names the repository of a request whose path is under root
// (the archive root, the path before /dists/ or /pool/): its category,
// scheme, host and port, and root.
func (x *exch) debRepo(root string) string {
	return x.v.Cat.Name + "|" + x.sc.scheme + "://" + hostPort(x.host, x.port) + root
}

// debSplit splits a path at its first seg ("/dists/", "/pool/") into
// the archive root and the rest. Only a plain path splits: one a server
// can read only one way (no dot segments, escapes, ";" or "\\"), so that
// a request under one root cannot fetch another's file; and only one
// whose root is at most maxDebName bytes.
func debSplit(pth, seg string) (root, rest string, ok bool) {
	pth = policies.AptUnescape(pth)
	roots := debRoots(pth, seg)
	if len(roots) == 0 {
		return "", "", false
	}
	return roots[0], pth[len(roots[0])+1:], true
}

// debRoots are the archive roots pth (apt's escapes undone) could be
// under, one for each seg in it, shortest first: a root may itself hold
// "/pool/" or "/dists/".
// debVersion tries them longest first, the nearest repository.
func debRoots(pth, seg string) []string {
	if !debPlain(pth) {
		return nil
	}
	var roots []string
	for i := 0; ; i++ {
		j := strings.Index(pth[i:], seg)
		if j < 0 || i+j > maxDebName {
			return roots
		}
		i += j
		roots = append(roots, pth[:i])
	}
}

func debPlain(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("/._~+-", c) >= 0) {
			return false
		}
	}
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// debIndexFor says whether the request may fetch a Packages index whose
// digests the gate should remember: a GET of a plain path under /dists/
// through a registries category, with the package cache on.
func (p *Proxy) debIndexFor(x *exch, req *http.Request) bool {
	cat := x.v.Cat
	if p.cfg.PackageCache == nil || cat == nil || cat.Kind != policies.KindRegistries || req.Method != http.MethodGet || x.pkg.Ecosystem != "" {
		return false
	}
	// The cheap tests first: this runs for every metadata request. A
	// by-hash file is an index only under a binary-* directory (not a
	// Translation, Contents or Sources file, read whole for nothing).
	pth := x.path
	if !strings.HasPrefix(path.Base(pth), "Packages") && !(strings.Contains(pth, "/binary-") && strings.Contains(pth, "/by-hash/SHA256/")) {
		return false
	}
	_, _, ok := debSplit(pth, "/dists/")
	return ok
}

// debIndexResponse passes a Packages index on as it comes, feeding a
// parser as the bytes pass; once the body ended whole and parsed, the
// digests it lists are remembered for its repository. A cut or corrupt
// index, or one listing over maxDebDigests .debs, adds nothing: its
// .debs stay unknown.
func (p *Proxy) debIndexResponse(x *exch, resp *http.Response) *http.Response {
	if resp.StatusCode != http.StatusOK || resp.Body == nil {
		return resp
	}
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		return resp // asked for identity; what else came is not read
	}
	pth := x.path
	root, _, ok := debSplit(pth, "/dists/")
	if !ok {
		return resp
	}
	sem := p.cfg.PackageCache.debParses
	select {
	case sem <- struct{}{}:
	default:
		p.log.Warn("proxy: package gate: Packages index not read: others are being read (at most 4 at once); its .debs stay unchecked", "id", x.ev.e.ID, "path", pth)
		return resp
	}
	resp.Body = p.debIndexTee(resp.Body, x.debRepo(root), x.ev.e.ID, pth, func() { <-sem })
	return resp
}

// debIndexTee starts the parser of the index rc carries; release runs
// when it ends (it gives back the parse slot).
func (p *Proxy) debIndexTee(rc io.ReadCloser, repo, id, pth string, release func()) *teeIndex {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer release()
		p.readDebIndex(pr, done, repo, id, pth)
	}()
	return &teeIndex{rc: rc, pw: pw, done: done}
}

// readDebIndex parses an index as the tee hands it on and, when it ended
// whole, remembers its digests; done is closed then.
func (p *Proxy) readDebIndex(pr *io.PipeReader, done chan<- struct{}, repo, id, pth string) {
	defer close(done)
	debs := &p.cfg.PackageCache.debs
	var files []debFile
	held := 0
	err := pkgmeta.ReadDebianPackages(pr, maxDebIndexUn, func(f pkgmeta.DebianFile) error {
		name := strings.TrimPrefix(f.Filename, "./")
		if len(name) > maxDebName || !debPlain("/"+name) {
			return nil // no .deb request the gate checks could name it
		}
		if len(files) == debs.limit() {
			return fmt.Errorf("%w: over %d, the most remembered", errDebTooMany, debs.limit())
		}
		fl := debFile{name, f.Integrity}
		if held += fl.size(repo); held > maxDebDigestBytes {
			return fmt.Errorf("%w: over %d bytes of digests, the most remembered", errDebTooMany, maxDebDigestBytes)
		}
		files = append(files, fl)
		return nil
	})
	if err == nil {
		_, err = io.Copy(io.Discard, pr) // only a body read to its end counts
	}
	pr.CloseWithError(errDebCut)
	switch {
	case err == nil:
		if debs.put(repo, files) {
			p.log.Info("proxy: package gate: the remembered .deb digests were full and start over: other repositories' .debs are unknown until apt fetches their indices again", "id", id, "path", pth)
		}
	case errors.Is(err, pkgmeta.ErrNotPackages) || errors.Is(err, errDebCut):
		p.log.Debug("proxy: package gate: Packages index not read", "id", id, "path", pth, "err", err)
	default:
		p.log.Warn("proxy: package gate: Packages index refused: its .debs stay unchecked", "id", id, "path", pth, "err", err)
	}
}

// teeIndex passes a body on and feeds what it passes (up to maxDebIndex)
// to the index parser. At the body's end it waits for the parser to
// finish the last bytes, so the digests are in before the client has
// the index whole.
type teeIndex struct {
	rc   io.ReadCloser
	done <-chan struct{}
	mu   sync.Mutex
	pw   *io.PipeWriter // nil once the parser has all it gets
	n    int64
}

func (t *teeIndex) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pw != nil {
		t.feed(b[:n], err)
	}
	return n, err
}

func (t *teeIndex) feed(b []byte, err error) {
	if t.n += int64(len(b)); t.n > maxDebIndex {
		t.end(errDebTooLarge)
		return
	}
	if len(b) > 0 {
		if _, werr := t.pw.Write(b); werr != nil { // the parser stopped
			t.pw = nil
			return
		}
	}
	switch {
	case err == io.EOF:
		t.pw.Close()
		t.pw = nil
		<-t.done
	case err != nil:
		t.end(fmt.Errorf("%w: %w", errDebCut, err))
	}
}

func (t *teeIndex) end(err error) {
	t.pw.CloseWithError(err)
	t.pw = nil
}

func (t *teeIndex) Close() error {
	t.mu.Lock()
	if t.pw != nil {
		t.end(errDebCut)
	}
	t.mu.Unlock()
	return t.rc.Close()
}

// debVersion is what the Packages indices of the .deb's repository said
// of it.
func (p *Proxy) debVersion(x *exch) pkgmeta.Version {
	pc := p.cfg.PackageCache
	if pc == nil {
		return pkgmeta.Version{}
	}
	pth := policies.AptUnescape(x.path)
	roots := debRoots(pth, "/pool/")
	for i := len(roots) - 1; i >= 0; i-- {
		root := roots[i]
		if sri := pc.debs.get(x.debRepo(root), pth[len(root)+1:]); sri != "" {
			return pkgmeta.Version{Version: x.pkg.Version, Integrity: sri}
		}
	}
	return pkgmeta.Version{Version: x.pkg.Version}
}
