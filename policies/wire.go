package policies

import (
	"encoding"
	"fmt"
	"reflect"
	"sort"

	"airlock/internal/tomlpos"
)

// The wire structs are the policy file's shape, one field per key named by
// its toml tag. The tags are the only list of a section's keys: unknown-key
// errors, their did-you-mean, the "applies only to" checks (a `kind` tag)
// and the JSON Schema (schema.go) all read them.
//
// BurntSushi/toml parses the file; decode then fills a wire struct from
// the parsed table key by key instead of toml's own decoding, which stops
// at the first value of the wrong type, matches keys case-insensitively
// (so "Hosts" would pass for hosts) and cannot say which element of an
// array is wrong. Here a value of the wrong type is reported at its place
// (file:line:col, key path) and its field left unset, so one load reports
// every problem.

type wirePolicy struct {
	Version     any            `toml:"version"` // checked by the loader: version = 1
	Mode        *modeWord      `toml:"mode"`
	Description *string        `toml:"description"`
	DNS         *wireDNS       `toml:"dns"`
	Deny        *wireDeny      `toml:"deny"`
	Categories  map[string]any `toml:"categories"` // each a wireCategory, decoded once its kind is known
	Tests       list           `toml:"tests"`      // each a wireTest
}

type wireDNS struct {
	Upstreams        strs       `toml:"upstreams"`
	Block            *blockWord `toml:"block"`
	MaxLabel         *int64     `toml:"max_label"`
	MaxName          *int64     `toml:"max_name"`
	QueriesPerMinute *int64     `toml:"queries_per_minute"`
	QueriesPerSecond *int64     `toml:"queries_per_second"`
	NamesPerParent   *int64     `toml:"names_per_parent"`
	QTypes           strs       `toml:"qtypes"`
}

type wireDeny struct {
	Hosts strs `toml:"hosts"`
	CIDRs strs `toml:"cidrs"`
}

type wireTest struct {
	Name      *string `toml:"name"`
	Request   *string `toml:"request"`
	Expect    *string `toml:"expect"`
	Rule      *string `toml:"rule"`
	Category  *string `toml:"category"`
	WouldDeny *bool   `toml:"would_deny"`
}

// wireCategory is one [categories.NAME] table. A field with a kind tag
// applies only to categories of that kind; one tagged lint is read only
// by the lints. The order of the fields is the order did-you-mean prefers
// on a tie.
type wireCategory struct {
	Kind            *string     `toml:"kind"`
	Mode            *modeWord   `toml:"mode"`
	Action          *actionWord `toml:"action"`
	Description     *string     `toml:"description"`
	Hosts           strs        `toml:"hosts"`
	CIDRs           strs        `toml:"cidrs"`
	Ports           list        `toml:"ports"`
	HTTP            *bool       `toml:"http"`
	Methods         strs        `toml:"methods"`
	Routes          list        `toml:"routes"` // each a wireRoute
	Inspect         *bool       `toml:"inspect"`
	Inject          *wireInject `toml:"inject"`
	Sentinels       strs        `toml:"sentinels"`
	SentinelBody    *bool       `toml:"sentinel_body"`
	SentinelHeaders strs        `toml:"sentinel_headers"`
	LogQuery        *bool       `toml:"log_query"`
	DNSTypes        strs        `toml:"dns_types"`
	AllowDoH        *bool       `toml:"allow_doh"`

	Push  *bool `toml:"push" kind:"git"`
	Repos strs  `toml:"repos" kind:"git"`

	Packages            *wirePackages `toml:"packages" kind:"registries"`
	Publish             *bool         `toml:"publish" kind:"registries"`
	PathPrefix          any           `toml:"path_prefix" kind:"registries"` // a string or a list of strings
	Lockfiles           strs          `toml:"lockfiles" kind:"registries"`
	MinReleaseAge       *string       `toml:"min_release_age" kind:"registries"`
	ReleaseAgeExempt    strs          `toml:"release_age_exempt" kind:"registries"`
	UnknownReleaseAge   *string       `toml:"unknown_release_age" kind:"registries"`
	InstallScripts      *string       `toml:"install_scripts" kind:"registries"`
	InstallScriptsAllow strs          `toml:"install_scripts_allow" kind:"registries"`
	Sdists              *string       `toml:"sdists" kind:"registries"`
	SdistsAllow         strs          `toml:"sdists_allow" kind:"registries"`

	Paths   strs    `toml:"paths" kind:"webhooks"`
	MaxBody any     `toml:"max_body" kind:"webhooks"` // bytes, or a string such as "64KiB"
	Rate    *string `toml:"rate" kind:"webhooks"`

	RiskyCIDRs *bool `toml:"cidrs_reach_host_and_metadata" kind:"lint"` // HatchRiskyCIDRs

	routes []wireRoute // the elements of Routes that are tables, decoded
}

// gatePresent: some key of the package gate is written.
func (w *wireCategory) gatePresent() bool {
	return w.MinReleaseAge != nil || w.ReleaseAgeExempt.set || w.UnknownReleaseAge != nil || w.InstallScripts != nil ||
		w.InstallScriptsAllow.set || w.Sdists != nil || w.SdistsAllow.set
}

type wireRoute struct {
	Methods strs    `toml:"methods"`
	Path    *string `toml:"path"`
}

type wireInject struct {
	Header *string `toml:"header"`
	Secret *string `toml:"secret"`
	Format *string `toml:"format"`
}

type wirePackages struct {
	Allow strs `toml:"allow"`
	Deny  strs `toml:"deny"`
}

// strs is an array of strings. set is true when the key is written, even
// with a value of another type; vals are its string elements, paths
// their key paths (an element of another type is reported and skipped).
type strs struct {
	set         bool
	vals, paths []string
}

func (s *strs) take(l *loader, raw any, path string) {
	s.set = true
	items, ok := asList(raw)
	if !ok {
		l.errf(path, "want an array, got %s", tomlType(raw))
		return
	}
	all := elemPaths(path, len(items))
	for i, it := range items {
		str, isStr := it.(string)
		if !isStr {
			l.errf(all[i], "want a string, got %s", tomlType(it))
			continue
		}
		s.vals = append(s.vals, str)
		s.paths = append(s.paths, all[i])
	}
}

// list is an array of values of any type. set is true when the key is
// written, ok when it is an array.
type list struct {
	set, ok bool
	items   []any
}

func (a *list) take(l *loader, raw any, path string) {
	a.set = true
	if a.items, a.ok = asList(raw); !a.ok {
		l.errf(path, "want an array, got %s", tomlType(raw))
	}
}

func asList(v any) ([]any, bool) {
	switch a := v.(type) {
	case []any:
		return a, true
	case []map[string]any:
		out := make([]any, len(a))
		for i := range a {
			out[i] = a[i]
		}
		return out, true
	}
	return nil, false
}

// modeWord, blockWord and actionWord are the words mode, dns.block and
// action take (their tables feed the JSON Schema too).
type (
	modeWord   Mode
	blockWord  BlockAnswer
	actionWord Action
)

func (m *modeWord) UnmarshalText(b []byte) error {
	v, ok := modeByName[string(b)]
	if !ok {
		return fmt.Errorf("unknown mode %q (want \"enforce\" or \"audit\")", b)
	}
	*m = modeWord(v)
	return nil
}

func (w *blockWord) UnmarshalText(b []byte) error {
	v, ok := blockByName[string(b)]
	if !ok {
		return fmt.Errorf("unknown answer %q (want \"nxdomain\" or \"refused\")", b)
	}
	*w = blockWord(v)
	return nil
}

func (a *actionWord) UnmarshalText(b []byte) error {
	v, ok := parseAction(string(b))
	if !ok {
		return fmt.Errorf("unknown action %q (want \"allow\", \"deny\", \"ask\" or \"audit\")", b)
	}
	*a = actionWord(v)
	return nil
}

func fieldsOf(t reflect.Type) *tomlpos.Fields { return tomlpos.FieldsOf(t) }

func keysOf[T any]() []string { return fieldsOf(reflect.TypeFor[T]()).Names }

// kindOf is the kind tag of a wireCategory key: the kind it applies only
// to, "lint" for a key only the lints read, or "".
func kindOf(fs *tomlpos.Fields, key string) string { return fs.Tag[key].Get("kind") }

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

type taker interface {
	take(l *loader, raw any, path string)
}

var takerType = reflect.TypeFor[taker]()

// decode fills the wire struct *v from the table m at path. A key no
// field names is an unknown key, suggested the closest of names (v's keys
// when names is nil).
func (l *loader) decode(m map[string]any, path string, v any, names []string) {
	rv := reflect.ValueOf(v).Elem()
	fs := fieldsOf(rv.Type())
	if names == nil {
		names = fs.Names
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		i, ok := fs.Index[k]
		if !ok {
			msg := "unknown key"
			if s := tomlpos.Closest(k, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			l.errf(tomlpos.Join(path, k), "%s", msg)
			continue
		}
		l.value(m[k], tomlpos.Join(path, k), rv.Field(i))
	}
}

// want says what a field of each scalar kind takes.
var want = map[reflect.Kind]string{reflect.String: "a string", reflect.Bool: "true or false", reflect.Int64: "an integer"}

// value decodes one value into field f, or reports why it cannot.
func (l *loader) value(raw any, path string, f reflect.Value) {
	if f.Addr().Type().Implements(takerType) {
		f.Addr().Interface().(taker).take(l, raw, path)
		return
	}
	switch f.Kind() {
	case reflect.Interface:
		f.Set(reflect.ValueOf(raw))
		return
	case reflect.Map: // a table whose keys are names
		if m, ok := raw.(map[string]any); ok {
			f.Set(reflect.ValueOf(m))
		} else {
			l.errf(path, "want a table, got %s", tomlType(raw))
		}
		return
	}
	p := reflect.New(f.Type().Elem()) // f is a pointer: nil when the key is not written
	switch {
	case p.Type().Implements(textUnmarshaler):
		s, ok := raw.(string)
		if !ok {
			l.errf(path, "want a string, got %s", tomlType(raw))
			return
		}
		if err := p.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			l.errf(path, "%v", err)
			return
		}
	case p.Elem().Kind() == reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			l.errf(path, "want a table, got %s", tomlType(raw))
			return
		}
		l.decode(m, path, p.Interface(), nil)
	case want[p.Elem().Kind()] != "": // string, bool, int64: as the parser makes them
		v := reflect.ValueOf(raw)
		if !v.IsValid() || v.Type() != p.Elem().Type() {
			l.errf(path, "want %s, got %s", want[p.Elem().Kind()], tomlType(raw))
			return
		}
		p.Elem().Set(v)
	default:
		panic("policies: wire field of unsupported type " + f.Type().String())
	}
	f.Set(p)
}
