package serve

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"airlock/internal/tomlpos"
)

// decodeStrict decodes src into the struct *v (the config, the
// principals file) one key at a time, so that every bad value and every
// unknown key is reported, not only the first (users.md S12); keys are
// matched by their exact name (toml's own decoding would also take one
// that differs in case). It returns the errors and the keys whose value
// did not decode (so validation does not report them again as missing).
// A syntax error stops decoding: nothing after it can be trusted (ok is
// false).
func decodeStrict(name string, src []byte, v any) (errs Errors, failed map[string]bool, ok bool) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(src), &top)
	if err != nil {
		return Errors{decodeError(name, src, err)}, nil, false
	}
	d := configDecoder{md: md, name: name, src: src, loc: newLocator(name, src), failed: map[string]bool{}}
	d.table(nil, top, reflect.ValueOf(v).Elem())
	return d.errs, d.failed, true
}

type configDecoder struct {
	md     toml.MetaData
	name   string
	src    []byte
	loc    locator
	errs   Errors
	failed map[string]bool
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// table decodes each key of tbl into the field of v whose toml tag names it.
func (d *configDecoder) table(prefix toml.Key, tbl map[string]toml.Primitive, v reflect.Value) {
	fs := tomlpos.FieldsOf(v.Type())
	names := slices.Sorted(slices.Values(fs.Names))
	for _, k := range primKeys(tbl) {
		key := append(prefix[:len(prefix):len(prefix)], k)
		i, ok := fs.Index[k]
		if !ok {
			d.unknown(key, tbl[k], names)
			continue
		}
		f := v.Field(i)
		if isSection(f) {
			if sub, ok := d.sub(key, tbl[k]); ok {
				d.table(key, sub, f)
			}
			continue
		}
		if f.Kind() == reflect.Map && isSection(reflect.New(f.Type().Elem()).Elem()) { // [k.NAME] tables
			d.tables(key, tbl[k], f)
			continue
		}
		if err := d.md.PrimitiveDecode(tbl[k], f.Addr().Interface()); err != nil {
			d.errs = append(d.errs, decodeError(d.name, d.src, err))
			d.failed[key.String()] = true
		}
	}
}

// sub decodes a table's keys, or reports that the value is not a table.
func (d *configDecoder) sub(key toml.Key, p toml.Primitive) (map[string]toml.Primitive, bool) {
	var sub map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(p, &sub); err != nil {
		d.errs = append(d.errs, d.loc.errorf(key, "%s: want a table [%s]", key, key))
		d.failed[key.String()] = true
		return nil, false
	}
	return sub, true
}

// tables decodes a table of named tables ([principals.NAME]) into the
// map m, each one key at a time.
func (d *configDecoder) tables(key toml.Key, p toml.Primitive, m reflect.Value) {
	named, ok := d.sub(key, p)
	if !ok {
		return
	}
	if m.IsNil() {
		m.Set(reflect.MakeMapWithSize(m.Type(), len(named)))
	}
	for _, name := range primKeys(named) {
		k := append(key[:len(key):len(key)], name)
		sub, ok := d.sub(k, named[name])
		if !ok {
			continue
		}
		e := reflect.New(m.Type().Elem()).Elem()
		d.table(k, sub, e)
		m.SetMapIndex(reflect.ValueOf(name), e)
	}
}

// unknown reports a key no field takes, with the closest known name, and
// every key below it (an unknown table's keys are unknown too).
func (d *configDecoder) unknown(key toml.Key, p toml.Primitive, names []string) {
	msg := fmt.Sprintf("unknown key %q", key.String())
	if s := tomlpos.Closest(key[len(key)-1], names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", joinKey(key[:len(key)-1], s))
	}
	d.errs = append(d.errs, d.loc.errorf(key, "%s", msg))
	var sub map[string]toml.Primitive
	if d.md.PrimitiveDecode(p, &sub) != nil {
		return
	}
	for _, k := range primKeys(sub) {
		k := append(key[:len(key):len(key)], k)
		d.errs = append(d.errs, d.loc.errorf(k, "unknown key %q", k.String()))
	}
}

func joinKey(prefix toml.Key, last string) string {
	return strings.Join(append(append([]string{}, prefix...), last), ".")
}

// isSection: a struct field that is a TOML table, not a value type that
// decodes itself from text (Duration, netip.Prefix, ...).
func isSection(f reflect.Value) bool {
	return f.Kind() == reflect.Struct && !f.Addr().Type().Implements(textUnmarshaler)
}

func primKeys(m map[string]toml.Primitive) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
