package tomlpos

import (
	"reflect"
	"strings"
	"sync"
)

// Fields is what the toml tags of a struct type name: its keys in field
// order, the field index of each, and each field's whole tag (for other
// annotations, such as the policy loader's kind tag). Both strict readers
// look keys up here by their exact name: toml's own decoding would also
// take a key that differs in case.
type Fields struct {
	Names []string
	Index map[string]int
	Tag   map[string]reflect.StructTag
}

var fieldCache sync.Map // reflect.Type -> *Fields

// FieldsOf returns the Fields of struct type t. A field without a toml
// tag, or tagged "-", names no key.
func FieldsOf(t reflect.Type) *Fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*Fields)
	}
	f := &Fields{Index: map[string]int{}, Tag: map[string]reflect.StructTag{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.Names = append(f.Names, name)
		f.Index[name] = i
		f.Tag[name] = t.Field(i).Tag
	}
	fieldCache.Store(t, f)
	return f
}

// Closest returns the first of names within edit distance 2 of k, the
// nearest one, or "" (for "did you mean" hints).
func Closest(k string, names []string) string {
	best, bestD := "", 3
	for _, c := range names {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
