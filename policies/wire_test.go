package policies

import (
	"reflect"
	"testing"

	"airlock/internal/tomlpos"
)

// TestWireFieldsDecode: every key of every wire struct takes a value of
// each TOML type without a panic (a field of a type decode does not know
// would panic), and a value of the right type (for words: a word it
// takes) is taken without an error.
func TestWireFieldsDecode(t *testing.T) {
	values := []any{"x", "audit", "refused", int64(1), true, 1.5, []any{"x"}, []map[string]any{{}}, map[string]any{}}
	for _, v := range []any{&wirePolicy{}, &wireDNS{}, &wireDeny{}, &wireCategory{}, &wireRoute{}, &wireInject{}, &wirePackages{}, &wireTest{}} {
		typ := reflect.TypeOf(v).Elem()
		for _, key := range fieldsOf(typ).Names {
			taken := false
			for _, raw := range values {
				l := &loader{file: "x.toml", ix: tomlpos.Scan("")}
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s.%s = %#v: panic %v", typ.Name(), key, raw, r)
						}
					}()
					l.decode(map[string]any{key: raw}, "", reflect.New(typ).Interface(), nil)
				}()
				taken = taken || len(l.errs) == 0
			}
			if !taken {
				t.Errorf("%s.%s: no TOML value is taken", typ.Name(), key)
			}
		}
	}
}
