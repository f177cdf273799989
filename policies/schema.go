package policies

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// The JSON Schema (draft 2020-12) of the policy language, for editors
// (taplo / Even Better TOML read it from a `#:schema` comment). It is
// generated from the wire structs and word tables the loader itself uses
// (wirePolicy, wireDNS, wireCategory, ..., kindList, actionNames,
// modeByName): a key the loader reads without a type below is an error of
// Schema, so the two cannot drift apart (schema_test.go also checks the
// committed docs/policy.schema.json). The schema is a first line of
// defence in the editor; the loader's checks (host syntax, CIDRs, paths,
// lints) go further.

type schema = map[string]any

func str(desc string) schema     { return schema{"type": "string", "description": desc} }
func boolean(desc string) schema { return schema{"type": "boolean", "description": desc} }
func strList(desc string) schema {
	return schema{"type": "array", "items": schema{"type": "string"}, "description": desc}
}
func intRange(lo, hi int, desc string) schema {
	s := schema{"type": "integer", "minimum": lo, "description": desc}
	if hi > 0 {
		s["maximum"] = hi
	}
	return s
}
func enum(desc string, words []string) schema {
	return schema{"type": "string", "enum": words, "description": desc}
}
func ref(def string) schema { return schema{"$ref": "#/$defs/" + def} }
func withDesc(s schema, desc string) schema {
	s["description"] = desc
	return s
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// keyTypes is the type of every key, by section, that the loader reads.
var keyTypes = map[string]map[string]schema{
	"": {
		"version":     withDesc(schema{"const": 1}, "the policy language version: 1"),
		"mode":        enum("enforce denies what the policy denies; audit lets it through and logs would_deny", sortedNames(modeByName)),
		"description": str("what the policy is for"),
		"dns":         ref("dns"),
		"deny":        ref("deny"),
		"categories":  ref("categories"),
		"tests":       schema{"type": "array", "items": ref("test"), "description": "requests and the verdict each must get (airlock policy test)"},
	},
	"dns": {
		"upstreams":          strList("resolvers (address:port) this policy's queries go to"),
		"block":              enum("the answer to a denied query", sortedNames(blockByName)),
		"max_label":          intRange(1, 63, "longest label a query may have"),
		"max_name":           intRange(1, 253, "longest name a query may have"),
		"queries_per_minute": intRange(0, 1<<31-1, "queries per minute per sandbox (0: no limit)"),
		"queries_per_second": intRange(0, 1<<31-1, "queries per second per sandbox (0: no limit)"),
		"names_per_parent":   intRange(0, 1<<31-1, "distinct names under one parent domain (0: no limit)"),
		"qtypes":             strList("query types answered (default A AAAA CNAME HTTPS SVCB MX SRV)"),
	},
	"deny": {
		"hosts": strList("host patterns always denied"),
		"cidrs": strList("address ranges always denied"),
	},
	"category": {
		"kind":             enum("what the category is; defaults to the category's name when that is a kind", kindList),
		"mode":             enum("overrides the policy's mode for this category", sortedNames(modeByName)),
		"action":           enum("what happens to the category's traffic", actionNames[:]),
		"description":      str("what the category is for"),
		"hosts":            strList("exact names, or *.name for strict subdomains"),
		"cidrs":            strList("non-public address ranges the category may reach"),
		"ports":            schema{"type": "array", "items": ref("port"), "description": "ports (default 443; 80 too with http = true)"},
		"http":             boolean("allow plain HTTP on port 80"),
		"methods":          strList("HTTP methods allowed (\"*\" for any)"),
		"routes":           schema{"type": "array", "items": ref("route"), "description": "the method and path of every call allowed"},
		"inspect":          boolean("intercept TLS and decide per request (default true)"),
		"inject":           ref("inject"),
		"sentinels":        strList("secrets whose placeholders are swapped for the real value toward these hosts"),
		"sentinel_body":    boolean("swap placeholders in request bodies too"),
		"sentinel_headers": strList("headers placeholders may be swapped in"),
		"log_query":        boolean("keep the query string in request events"),
		"dns_types":        strList("extra query types answered for these hosts"),
		"allow_doh":        boolean("allow DNS-over-HTTPS requests to these hosts"),
		"push":             boolean("git: allow git push"),
		"repos":            strList("git: repositories (owner/name, * allowed) that may be fetched"),
		"packages":         ref("packages"),
		"publish":          boolean("registries: allow publishing packages"),
		"path_prefix": withDesc(schema{"anyOf": []schema{{"type": "string"}, {"type": "array", "items": schema{"type": "string"}}}},
			"registries: path prefixes the registry sits under, such as \"/api/npm/npm-remote/\""),
		"min_release_age":       withDesc(schema{"type": "string", "pattern": agePattern}, "registries: versions younger than this (\"72h\", \"3d\") are hidden from metadata and their downloads denied"),
		"release_age_exempt":    strList("registries: packages (eco:name[constraint]) the release-age gate does not apply to"),
		"unknown_release_age":   enum("registries: a version without a publish time is allowed (with a warning) or denied (default)", []string{"allow", "deny"}),
		"install_scripts":       enum("registries: npm versions with install scripts are allowed (default), denied or held for approval", []string{"allow", "ask", "deny"}),
		"sdists":                enum("registries: PyPI source distributions (built on install) are allowed (default) or hidden and denied", []string{"allow", "deny"}),
		"sdists_allow":          strList("registries: packages (pypi:name[constraint]) whose source distributions are allowed"),
		"lockfiles":             strList("registries: package-lock.json or requirements.txt (with --hash) files, relative to the policy; versions they do not list are denied (not_in_lockfile) and artifacts must match their digests"),
		"install_scripts_allow": strList("registries: packages (eco:name[constraint]) whose install scripts are allowed"),
		"paths":                 strList("webhooks: the exact URL paths hooks are posted to"),
		"max_body":              withDesc(schema{"anyOf": []schema{{"type": "integer", "minimum": 0}, {"type": "string", "pattern": sizePattern}}}, "webhooks: largest request body (bytes, or \"64KiB\", \"1MB\")"),
		"rate":                  withDesc(schema{"type": "string", "pattern": ratePattern}, "webhooks: request rate, such as \"10/min\""),
		HatchRiskyCIDRs:         boolean("accept cidrs that reach the host, the metadata service or everything (see docs/policy.md)"),
	},
	"route":    {"methods": strList("methods (\"*\" for any)"), "path": str("path pattern, such as /v2/** ")},
	"inject":   {"header": str("header to set"), "secret": str("secret name in the appliance's store"), "format": str("header value; {} is the secret (default \"{}\")")},
	"packages": {"allow": strList("packages allowed (eco:name[constraint]); the rest of that ecosystem is denied"), "deny": strList("packages denied (eco:name[constraint])")},
	"test": {
		"name":       str("a label for the case"),
		"request":    str("GET https://host/path, dns NAME [QTYPE] or connect HOST:PORT, with ip=, sni=, package= options"),
		"expect":     enum("the verdict the request must get", actionNames[:]),
		"rule":       str("the rule that must decide"),
		"category":   str("the category that must decide"),
		"would_deny": boolean("in audit mode: whether enforce would deny"),
	},
}

const (
	agePattern  = `^\s*([0-9]+d)?([0-9.]+(ns|us|µs|ms|s|m|h))*\s*$`
	sizePattern = `^\s*[0-9]+\s*(KiB|MiB|GiB|KB|MB|GB|B)$`
	ratePattern = `^\s*[0-9]+\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$`
)

// object is a closed table of the keys the loader reads in section.
func object(section string, keys []string, required ...string) (schema, error) {
	props := schema{}
	for _, k := range keys {
		t, ok := keyTypes[section][k]
		if !ok {
			return nil, fmt.Errorf("policies: schema: no type for key %q of %q", k, section)
		}
		props[k] = t
	}
	s := schema{"type": "object", "additionalProperties": false, "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s, nil
}

// loaderKeys is every key the loader reads, by section: the toml tags of
// its wire structs (wire.go).
func loaderKeys() map[string][]string {
	return map[string][]string{"": keysOf[wirePolicy](), "dns": keysOf[wireDNS](), "deny": keysOf[wireDeny](),
		"category": keysOf[wireCategory](), "route": keysOf[wireRoute](), "inject": keysOf[wireInject](),
		"packages": keysOf[wirePackages](), "test": keysOf[wireTest]()}
}

// Schema returns the policy language's JSON Schema, indented, as committed
// in docs/policy.schema.json (`airlock policy schema` prints it).
func Schema() ([]byte, error) {
	defs := schema{"port": schema{"anyOf": []schema{{"type": "integer", "minimum": 1, "maximum": 65535},
		{"type": "string", "pattern": `^[0-9]+(-[0-9]+)?$`}}}}
	for _, sec := range []struct {
		def, section string
		required     []string
	}{{"dns", "dns", nil}, {"deny", "deny", nil}, {"route", "route", keysOf[wireRoute]()}, {"inject", "inject", []string{"header", "secret"}},
		{"packages", "packages", nil}, {"test", "test", []string{"request", "expect"}}} {
		s, err := object(sec.section, loaderKeys()[sec.section], sec.required...)
		if err != nil {
			return nil, err
		}
		defs[sec.def] = s
	}
	if err := categoryDefs(defs); err != nil {
		return nil, err
	}
	top, err := object("", keysOf[wirePolicy](), "version")
	if err != nil {
		return nil, err
	}
	top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	top["title"] = "Airlock egress policy"
	top["description"] = "An Airlock egress policy (docs/policy.md). Generated by `airlock policy schema`; do not edit."
	top["$defs"] = defs
	b, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// categoryDefs adds one definition per kind (its keys, kind optional),
// "category" (kind required: a category not named after a kind) and
// "categories" (a table named after a kind may leave kind out).
func categoryDefs(defs schema) error {
	var oneOf []schema
	byName := schema{}
	for _, name := range kindList {
		k := kindByName[name]
		keys := append(categoryKeys(k), lintKeys()...)
		var required []string
		switch k {
		case KindInternalAPI:
			required = []string{"routes"}
		case KindWebhooks:
			required = []string{"paths"}
		}
		s, err := object("category", keys, required...)
		if err != nil {
			return err
		}
		props := s["properties"].(schema)
		props["kind"] = schema{"const": name, "description": props["kind"].(schema)["description"]}
		s["anyOf"] = []schema{{"required": []string{"hosts"}}, {"required": []string{"cidrs"}}}
		s["description"] = "a " + name + " category"
		defs["category-"+name] = s
		oneOf = append(oneOf, ref("category-"+name))
		byName[name] = schema{"anyOf": []schema{ref("category-" + name), ref("category")}}
	}
	defs["category"] = schema{"type": "object", "required": []string{"kind"}, "oneOf": oneOf,
		"description": "a category; kind is required unless the category is named after one"}
	defs["categories"] = schema{"type": "object", "properties": byName, "additionalProperties": ref("category"),
		"description": "named groups of destinations, each with a kind"}
	return nil
}

// schemaKeys is every key keyTypes gives a type, by section (for the test
// that no type is left for a key the loader no longer reads).
func schemaKeys() map[string][]string {
	out := map[string][]string{}
	for sec, m := range keyTypes {
		out[sec] = sortedNames(m)
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}
