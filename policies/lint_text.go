package policies

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/publicsuffix"
)

// isPublicSuffix reports whether a name is itself a public suffix ("com",
// "co.uk", a hosting suffix from the list's private section). A top-level
// label the list does not know counts as one, as the list's default rule
// says.
func isPublicSuffix(name string) bool {
	ps, _ := publicsuffix.PublicSuffix(name)
	return ps == name
}

// formatChar is an invisible character found in a policy file.
type formatChar struct {
	r         rune
	name      string
	line, col int
}

var formatCharNames = map[rune]string{
	0x00AD: "SOFT HYPHEN",
	0x061C: "ARABIC LETTER MARK",
	0x180E: "MONGOLIAN VOWEL SEPARATOR",
	0x200B: "ZERO WIDTH SPACE",
	0x200C: "ZERO WIDTH NON-JOINER",
	0x200D: "ZERO WIDTH JOINER",
	0x200E: "LEFT-TO-RIGHT MARK",
	0x200F: "RIGHT-TO-LEFT MARK",
	0x2028: "LINE SEPARATOR",
	0x2029: "PARAGRAPH SEPARATOR",
	0x202A: "LEFT-TO-RIGHT EMBEDDING",
	0x202B: "RIGHT-TO-LEFT EMBEDDING",
	0x202C: "POP DIRECTIONAL FORMATTING",
	0x202D: "LEFT-TO-RIGHT OVERRIDE",
	0x202E: "RIGHT-TO-LEFT OVERRIDE",
	0x2060: "WORD JOINER",
	0x2066: "LEFT-TO-RIGHT ISOLATE",
	0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE",
	0x2069: "POP DIRECTIONAL ISOLATE",
	0xFEFF: "ZERO WIDTH NO-BREAK SPACE",
}

// maxFormatChars bounds how many are reported; one is enough to act on.
const maxFormatChars = 20

// findFormatChars scans raw bytes for bidi controls and invisible format
// characters (Unicode category Cf, and the line and paragraph separators),
// in comments and strings alike. A byte order mark at the very start is a
// file encoding mark, not content, and is allowed. Columns count bytes, as
// every other position in a policy does.
func findFormatChars(data []byte) []formatChar {
	var out []formatChar
	line, col := 1, 1
	for i := 0; i < len(data) && len(out) < maxFormatChars; {
		c := data[i]
		if c < utf8.RuneSelf {
			if c == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if isFormatChar(r) && !(r == 0xFEFF && i == 0) {
			name := formatCharNames[r]
			if name == "" {
				name = "invisible format character"
			}
			out = append(out, formatChar{r: r, name: name, line: line, col: col})
		}
		i += size
		col += size
	}
	return out
}

func isFormatChar(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
}
