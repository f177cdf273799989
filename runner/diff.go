package runner

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of the workspace diff.
const (
	maxTextFile  = 256 << 10 // larger files are listed, not patched
	maxDiffEdits = 4000      // more edits than this: the file is shown replaced
)

// maxHashed bounds the bytes hashed per file; larger files are also compared
// by size and modification time. (A variable so the fuzz target can lower it.)
var maxHashed int64 = 64 << 20

type entry struct {
	typ  byte
	mode int64
	link string
	sum  [32]byte
	size int64
	text []byte // content, for text files up to maxTextFile
	bin  bool
}

// indexTar reads a tar stream of /workspace into path -> entry. Names are
// relative to /workspace: a leading "workspace/" (as the engine's copy-out
// writes it) is stripped.
func indexTar(r io.Reader) (map[string]entry, error) {
	out := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		name := relName(h.Name)
		if name == "" {
			continue
		}
		e := entry{typ: h.Typeflag, mode: h.Mode & 0o7777, link: h.Linkname, size: h.Size}
		if h.Typeflag == tar.TypeReg {
			if e, err = readEntry(tr, h, e); err != nil {
				return nil, err
			}
		}
		out[name] = e
	}
}

func relName(n string) string {
	n = strings.TrimPrefix(path.Clean("/"+n), "/")
	if n == "workspace" {
		return ""
	}
	return strings.TrimPrefix(n, "workspace/")
}

func readEntry(tr io.Reader, h *tar.Header, e entry) (entry, error) {
	hash := sha256.New()
	var keep bytes.Buffer
	w := io.Writer(hash)
	if h.Size <= maxTextFile {
		w = io.MultiWriter(hash, &keep)
	}
	if _, err := io.CopyN(w, tr, min(h.Size, maxHashed)); err != nil {
		return e, err
	}
	if h.Size > maxHashed {
		fmt.Fprintf(hash, "\x00%d\x00%d", h.Size, h.ModTime.UnixNano())
	}
	copy(e.sum[:], hash.Sum(nil))
	b := keep.Bytes()
	e.bin = h.Size > maxTextFile || bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b)
	if !e.bin {
		e.text = b
	}
	return e, nil
}

// diffTrees lists what changed from old to cur and patches the text files.
func diffTrees(old, cur map[string]entry) Diff {
	names := slices.Sorted(maps.Keys(old))
	for n := range cur {
		if _, ok := old[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	d := Diff{Changes: []Change{}}
	var patch strings.Builder
	for _, n := range names {
		o, inOld := old[n]
		c, inCur := cur[n]
		kind := ""
		switch {
		case !inOld:
			kind = "added"
		case !inCur:
			kind = "deleted"
		case o.typ != c.typ || o.sum != c.sum || o.link != c.link || o.mode != c.mode:
			kind = "modified"
		}
		// Directories are implied by the files in them.
		if kind == "" || ((!inOld || o.typ == tar.TypeDir) && (!inCur || c.typ == tar.TypeDir)) {
			continue
		}
		isFile := (inOld && o.typ == tar.TypeReg) || (inCur && c.typ == tar.TypeReg)
		ch := Change{Path: n, Kind: kind, Binary: isFile && (o.bin || c.bin), Size: c.size}
		d.Changes = append(d.Changes, ch)
		if isFile && !ch.Binary && (o.typ == tar.TypeReg || !inOld) && (c.typ == tar.TypeReg || !inCur) {
			patch.WriteString(unified(n, kind, o.text, c.text))
		} else if ch.Binary {
			fmt.Fprintf(&patch, "Binary files a/%s and b/%s differ\n", n, n)
		}
	}
	d.Patch = patch.String()
	return d
}

// unified returns a unified diff of one file (3 lines of context).
func unified(name, kind string, a, b []byte) string {
	al, bl := splitLines(a), splitLines(b)
	from, to := "a/"+name, "b/"+name
	if kind == "added" {
		from = "/dev/null"
	}
	if kind == "deleted" {
		to = "/dev/null"
	}
	ops := lineDiff(al, bl)
	var sb strings.Builder
	hunks := hunksOf(ops, 3)
	if len(hunks) == 0 {
		return "" // only the mode changed
	}
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", from, to)
	for _, h := range hunks {
		writeHunk(&sb, h, al, bl)
	}
	return sb.String()
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.SplitAfter(string(b), "\n")
	if s[len(s)-1] == "" {
		s = s[:len(s)-1]
	}
	return s
}

// op is one line of an edit script: ' ' keep, '-' delete a[i], '+' insert b[j].
type op struct {
	kind byte
	i, j int
}

// lineDiff is Myers' O(ND) diff; past maxDiffEdits it gives up and returns
// "delete all, insert all".
func lineDiff(a, b []string) []op {
	n, m := len(a), len(b)
	maxD := min(n+m, maxDiffEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		trace = append(trace, slices.Clone(v))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, off, a, b, d, k)
			}
		}
	}
	var ops []op
	for i := range a {
		ops = append(ops, op{'-', i, 0})
	}
	for j := range b {
		ops = append(ops, op{'+', n, j})
	}
	return ops
}

func backtrack(trace [][]int, off int, a, b []string, d, _ int) []op {
	var rev []op
	x, y := len(a), len(b)
	for ; d > 0; d-- {
		v := trace[d]
		k := x - y
		pk := k - 1
		if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
			pk = k + 1
		}
		px := v[off+pk]
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, op{' ', x, y})
		}
		if pk == k+1 {
			rev = append(rev, op{'+', x, y - 1})
		} else {
			rev = append(rev, op{'-', x - 1, y})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, op{' ', x, y})
	}
	slices.Reverse(rev)
	return rev
}

type hunk struct{ ops []op }

// hunksOf groups changes with ctx lines of context around them.
func hunksOf(ops []op, ctx int) []hunk {
	var hs []hunk
	start, last := -1, -1
	for i, o := range ops {
		if o.kind == ' ' {
			continue
		}
		if start >= 0 && i-last > 2*ctx {
			hs = append(hs, hunk{ops[start:min(last+ctx+1, len(ops))]})
			start = -1
		}
		if start < 0 {
			start = max(i-ctx, 0)
		}
		last = i
	}
	if start >= 0 {
		hs = append(hs, hunk{ops[start:min(last+ctx+1, len(ops))]})
	}
	return hs
}

func writeHunk(sb *strings.Builder, h hunk, a, b []string) {
	var na, nb int
	for _, o := range h.ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	first := h.ops[0]
	as, bs := first.i+1, first.j+1
	if na == 0 {
		as--
	}
	if nb == 0 {
		bs--
	}
	fmt.Fprintf(sb, "@@ -%d,%d +%d,%d @@\n", as, na, bs, nb)
	for _, o := range h.ops {
		line := ""
		if o.kind == '+' {
			line = b[o.j]
		} else {
			line = a[o.i]
		}
		sb.WriteByte(o.kind)
		sb.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}
