package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// MaxLineBytes bounds one JSONL record when reading files: a longer line
// is an error with its place, not an unbounded allocation.
const MaxLineBytes = 4 << 20

// ReadJSONL calls fn for every record in a set of JSONL stream files, in
// chain order: the files are ordered by their first record's seq (so a
// rotated set events.jsonl, events.jsonl.1 … may be given in any order),
// records within a file in file order. A file that starts with the gzip
// magic is decompressed (a log rotator's events.jsonl.2.gz). "-" is stdin,
// read as one stream where it appears. A malformed line is an error
// naming file:line.
func ReadJSONL(paths []string, stdin io.Reader, fn func(Event) error) error {
	type file struct {
		path  string
		first uint64
	}
	files := make([]file, 0, len(paths))
	for _, p := range paths {
		first := uint64(0)
		if p != "-" {
			var err error
			if first, err = firstSeqOf(p); err != nil {
				return err
			}
		}
		files = append(files, file{p, first})
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].first < files[j].first })
	for _, f := range files {
		if err := readOne(f.path, stdin, fn); err != nil {
			return err
		}
	}
	return nil
}

// openJSONL opens path (or stdin for "-"), decompressing gzip.
func openJSONL(path string, stdin io.Reader) (*bufio.Reader, func(), error) {
	var r io.Reader = stdin
	closeFn := func() {}
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("audit: read %w", err)
		}
		if st, err := f.Stat(); err == nil && st.IsDir() {
			f.Close()
			return nil, nil, fmt.Errorf("audit: read %s: is a directory, want JSONL files", path)
		}
		r, closeFn = f, func() { f.Close() }
	}
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("audit: read %s: %w", path, err)
		}
		return bufio.NewReaderSize(zr, 1<<16), closeFn, nil
	}
	return br, closeFn, nil
}

func firstSeqOf(path string) (uint64, error) {
	var first uint64
	errStop := errors.New("stop")
	err := readOne(path, nil, func(e Event) error { first = e.Seq; return errStop })
	if err != nil && !errors.Is(err, errStop) {
		return 0, err
	}
	return first, nil
}

func readOne(path string, stdin io.Reader, fn func(Event) error) error {
	r, closeFn, err := openJSONL(path, stdin)
	if err != nil {
		return err
	}
	defer closeFn()
	name := path
	if path == "-" {
		name = "stdin"
	}
	return eachLine(r, name, fn)
}

func eachLine(br *bufio.Reader, name string, fn func(Event) error) error {
	for n := 1; ; n++ {
		raw, err := readLine(br)
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("audit: %s:%d: %w", name, n, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		rec, cerr := chainedRecord(raw)
		if cerr != nil {
			return fmt.Errorf("audit: %s:%d: %w", name, n, cerr)
		}
		var e Event
		if jerr := json.Unmarshal(rec, &e); jerr != nil || e.Kind == "" {
			if jerr == nil {
				jerr = errors.New("no kind field")
			}
			return fmt.Errorf("audit: %s:%d: not an audit record: %w", name, n, jerr)
		}
		if ferr := fn(e); ferr != nil {
			return ferr
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// readLine reads one line without its newline, at most MaxLineBytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLineBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
