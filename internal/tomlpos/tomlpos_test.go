package tomlpos

import (
	"reflect"
	"slices"
	"testing"

	"github.com/BurntSushi/toml"
)

const src = `version = 1
[categories.git]
hosts = ["a.test",
  "b.test"]
inject = { header = "A", secret = "s" }
push.x = true
[categories."my.cat"]
kind = "git"
[[tests]]
request = "dns a.test"
[[tests]]
expect = "deny"
`

func TestLookup(t *testing.T) {
	ix := Scan(src)
	for path, want := range map[string]Pos{
		"version":                      {1, 1},
		"categories.git":               {2, 1},
		"categories.git.hosts":         {3, 1},
		"categories.git.hosts[1]":      {4, 3},
		"categories.git.hosts[7]":      {3, 1}, // no such element: the array
		"categories.git.inject.secret": {5, 26},
		"categories.git.push.x":        {6, 1},
		`categories."my.cat".kind`:     {8, 1},
		"tests[1].expect":              {12, 1},
		"tests[1]":                     {11, 1},
		"categories.git.ports":         {2, 1}, // not written: its table
		"nowhere":                      {1, 1},
	} {
		if got := ix.Lookup(path); got != want {
			t.Errorf("Lookup(%s) = %v, want %v", path, got, want)
		}
	}
}

// TestFind: keys as a decoder names them (toml.Key), without indices.
func TestFind(t *testing.T) {
	ix := Scan(src)
	cases := []struct {
		key  toml.Key
		want Pos
		ok   bool
	}{
		{toml.Key{"categories", "git", "hosts"}, Pos{3, 1}, true},
		{toml.Key{"categories", "my.cat", "kind"}, Pos{8, 1}, true},
		{toml.Key{"categories", "git", "inject", "header"}, Pos{5, 12}, true},
		{toml.Key{"categories", "git", "hosts", "deeper"}, Pos{3, 1}, true}, // inside an assignment's value
		{toml.Key{"categories", "git", "ports"}, Pos{}, false},              // a table header does not hold it
		{toml.Key{"tests", "request"}, Pos{10, 1}, true},                    // the first element
		{toml.Key{"missing"}, Pos{}, false},
	}
	for _, tc := range cases {
		got, ok := ix.Find(tc.key...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Find(%v) = %v, %t; want %v, %t", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHasAndKeyAt(t *testing.T) {
	ix := Scan(src)
	for path, want := range map[string]bool{"categories.git.hosts[1]": true, "categories.git.hosts[2]": false,
		"categories.git.push.x": true, "categories.git.ports": false} {
		if ix.Has(path) != want {
			t.Errorf("Has(%s) = %t", path, !want)
		}
	}
	if got := ix.KeyAt(4, 5); got != "categories.git.hosts" {
		t.Errorf("KeyAt(4, 5) = %q, want categories.git.hosts", got)
	}
	if got := ix.KeyAt(5, 30); got != "categories.git.inject.secret" {
		t.Errorf("KeyAt(5, 30) = %q", got)
	}
}

func FuzzScan(f *testing.F) {
	f.Add(src)
	f.Add("[[a]]\nb.c = 1\n[a.\"x")
	f.Add("a = [[{b = '''x")
	f.Fuzz(func(t *testing.T, s string) {
		ix := Scan(s) // must not panic or loop
		for k := range ix.Keys {
			ix.Lookup(k)
			ix.Find(k)
		}
	})
}

func TestFieldsAndClosest(t *testing.T) {
	type s struct {
		A    string `toml:"hosts"`
		B    int    `toml:"ports,omitempty" kind:"git"`
		C    bool   `toml:"-"`
		D    bool   // no tag: no key
		Mode string `toml:"mode"`
	}
	f := FieldsOf(reflect.TypeFor[s]())
	if want := []string{"hosts", "ports", "mode"}; !slices.Equal(f.Names, want) {
		t.Errorf("Names = %v, want %v", f.Names, want)
	}
	if f.Index["mode"] != 4 || f.Tag["ports"].Get("kind") != "git" {
		t.Errorf("Index = %v, ports tag %q", f.Index, f.Tag["ports"])
	}
	for k, want := range map[string]string{"posts": "hosts", "Hosts": "hosts", "mod": "mode", "version": ""} {
		if got := Closest(k, f.Names); got != want { // "posts" ties: the first name wins
			t.Errorf("Closest(%q) = %q, want %q", k, got, want)
		}
	}
}
