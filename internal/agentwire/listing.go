package agentwire

import (
	"encoding/json"
	"fmt"
)

// A list answer streams its entries: TData frames, each a JSON array of
// FileInfo of at most ListChunk bytes, then TDataEnd and the Result (Bytes:
// the number of entries). A directory of any size fits: one Result frame
// held only about 5,000 entries.
const ListChunk = 256 << 10

// ChunkEntries encodes entries as JSON arrays of at most ListChunk bytes
// each (one entry alone is far below it: a name is at most 255 bytes, a
// link target at most MaxPath).
func ChunkEntries(fs []FileInfo) ([][]byte, error) {
	var out [][]byte
	buf := []byte{'['}
	for i := range fs {
		b, err := json.Marshal(&fs[i])
		if err != nil {
			return nil, fmt.Errorf("list: encode %q: %w", fs[i].Name, err)
		}
		if len(buf) > 1 && len(buf)+len(b)+2 > ListChunk {
			out = append(out, append(buf, ']'))
			buf = []byte{'['}
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	if len(buf) > 1 {
		out = append(out, append(buf, ']'))
	}
	return out, nil
}

// DecodeEntries decodes one TData frame of a list answer (from the agent:
// untrusted): a JSON array of FileInfo with no unknown fields.
func DecodeEntries(p []byte) ([]FileInfo, error) {
	if len(p) > ListChunk {
		return nil, fmt.Errorf("list: entries frame of %d bytes, over %d", len(p), ListChunk)
	}
	var fs []FileInfo
	if err := decodeStrict(p, &fs); err != nil {
		return nil, fmt.Errorf("list: entries frame: %w", err)
	}
	return fs, nil
}
