package serve

import (
	"encoding"
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/client"
)

// OpenAPI returns the control API's OpenAPI 3.1 document, built from
// apiOps, routeScopes and the client's types. docs/openapi.json is this
// document (TestOpenAPIDocIsCurrent); GET /v1/openapi.json serves it.
func OpenAPI() []byte {
	openapiOnce.Do(func() {
		b, err := json.MarshalIndent(buildOpenAPI(), "", "  ")
		if err != nil {
			panic(err) // maps and strings only: cannot fail
		}
		openapiDoc = append(b, '\n')
	})
	return openapiDoc
}

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

type obj = map[string]any

func buildOpenAPI() obj {
	s := &schemas{defs: obj{}}
	paths := obj{}
	for _, pattern := range sortedPatterns() {
		method, path, _ := strings.Cut(pattern, " ")
		p, _ := paths[openapiPath(path)].(obj)
		if p == nil {
			p = obj{}
			paths[openapiPath(path)] = p
		}
		p[strings.ToLower(method)] = s.operation(pattern, path, apiOps[pattern])
	}
	s.defs["Error"] = s.of(reflect.TypeFor[client.Error]())
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "Airlock control API", "version": client.APIVersion,
			"description": "The control API of `airlock serve` (docs/api.md). On the unix socket the caller is the admin " +
				"principal `local`; on the TCP listener (TLS) each request carries a principal's bearer token. " +
				"x-airlock-scope names the scope a route needs (\"\": any principal)."},
		"paths": paths,
		"components": obj{"schemas": s.defs, "securitySchemes": obj{
			"bearer": obj{"type": "http", "scheme": "bearer", "description": "a principal's token (airlock principal add)"}}},
		"security": []any{obj{"bearer": []any{}}},
	}
}

func sortedPatterns() []string {
	out := make([]string, 0, len(apiOps))
	for p := range apiOps {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// openapiPath turns a ServeMux path ("{name...}") into an OpenAPI one.
func openapiPath(p string) string { return strings.ReplaceAll(p, "...}", "}") }

func (s *schemas) operation(pattern, path string, op apiOp) obj {
	out := obj{"summary": op.Summary, "operationId": operationID(pattern), "x-airlock-scope": routeScope(pattern)}
	var params []any
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") {
			name := strings.TrimSuffix(strings.Trim(seg, "{}"), "...")
			params = append(params, obj{"name": name, "in": "path", "required": true, "schema": obj{"type": "string"}})
		}
	}
	for _, q := range op.Query {
		params = append(params, obj{"name": q, "in": "query", "schema": obj{"type": "string"}})
	}
	if params != nil {
		out["parameters"] = params
	}
	if op.Body != nil {
		out["requestBody"] = obj{"required": true, "content": s.content(op.Body)}
	}
	status := op.Status
	if status == 0 {
		status = map[bool]int{true: 204, false: 200}[op.Resp == nil]
	}
	ok := obj{"description": http.StatusText(status)}
	if op.Resp != nil {
		ok["content"] = s.content(op.Resp)
	}
	out["responses"] = obj{strconv.Itoa(status): ok, "default": obj{"description": "an API error",
		"content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/Error"}}}}}
	return out
}

func operationID(pattern string) string {
	method, path, _ := strings.Cut(pattern, " ")
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.NewReplacer("{", "", "}", "", "...", "", ".", "_", ":", "_").Replace(seg)
		for _, part := range strings.FieldsFunc(seg, func(r rune) bool { return r == '_' || r == '-' }) {
			if part != "v1" {
				b.WriteString(strings.ToUpper(part[:1]) + part[1:])
			}
		}
	}
	return b.String()
}

func (s *schemas) content(v any) obj {
	if media, ok := v.(string); ok {
		return obj{media: obj{}}
	}
	return obj{"application/json": obj{"schema": s.of(reflect.TypeOf(v))}}
}

// schemas turns Go types into JSON Schemas, named structs as components.
type schemas struct{ defs obj }

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[client.Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
	textMarshal  = reflect.TypeFor[encoding.TextMarshaler]()
)

func (s *schemas) of(t reflect.Type) obj {
	switch {
	case t == timeType:
		return obj{"type": "string", "format": "date-time"}
	case t == durationType:
		return obj{"type": "string", "description": "a Go duration, e.g. \"90s\""}
	case t == rawType:
		return obj{}
	case t.Kind() != reflect.Struct && t.Implements(textMarshal):
		return obj{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.of(t.Elem())
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return obj{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return obj{"type": "number"}
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return obj{"type": "string", "contentEncoding": "base64"}
		}
		return obj{"type": "array", "items": s.of(t.Elem())}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": s.of(t.Elem())}
	case reflect.Struct:
		return s.named(t)
	}
	return obj{}
}

func (s *schemas) named(t reflect.Type) obj {
	name := t.Name()
	if name == "" {
		return s.object(t)
	}
	if _, ok := s.defs[name]; !ok {
		s.defs[name] = obj{} // placeholder: recursive types end here
		s.defs[name] = s.object(t)
	}
	return obj{"$ref": "#/components/schemas/" + name}
}

func (s *schemas) object(t reflect.Type) obj {
	props := obj{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			if sub, ok := s.of(f.Type)["$ref"]; ok {
				for k, v := range s.defs[strings.TrimPrefix(sub.(string), "#/components/schemas/")].(obj)["properties"].(obj) {
					props[k] = v
				}
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		props[tag] = s.of(f.Type)
	}
	return obj{"type": "object", "properties": props}
}

// openapi is GET /v1/openapi.json.
func (a *API) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI())
}
