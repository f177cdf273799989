package audit

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Every JSON field of every kind is documented in docs/events.md, and the
// example there is a valid record.
func TestEventsDocCoversEveryField(t *testing.T) {
	b, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	et := reflect.TypeFor[Event]()
	for i := range et.NumField() {
		f := et.Field(i)
		name := jsonName(f)
		if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
			for _, sub := range fieldsOf(f.Type.Elem()) {
				if !strings.Contains(doc, "`"+name+"."+sub+"`") && !strings.Contains(doc, "`"+name+"."+sub+"` /") &&
					!strings.Contains(doc, "/ `"+name+"."+sub+"`") && !nestedDocumented(doc, name, sub) {
					t.Errorf("docs/events.md does not document %s.%s", name, sub)
				}
			}
			continue
		}
		if !strings.Contains(doc, "| `"+name+"` |") {
			t.Errorf("docs/events.md does not document the common field %s", name)
		}
	}
	i := strings.Index(doc, "```json\n")
	j := strings.Index(doc[i+8:], "```")
	var e Event
	if err := json.Unmarshal([]byte(doc[i+8:i+8+j]), &e); err != nil || e.Kind == "" || e.Seq == 0 {
		t.Errorf("the example is not a record: %v %+v", err, e)
	}
}

// nestedDocumented accepts an object field documented by its sub-fields
// (http.package: ecosystem, name, version).
func nestedDocumented(doc, parent, field string) bool {
	return strings.Contains(doc, "`"+parent+"."+field+"` | object") || strings.Contains(doc, "`"+parent+"."+field+"` | [object]")
}

func fieldsOf(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		out = append(out, jsonName(t.Field(i)))
	}
	return out
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	return strings.Split(tag, ",")[0]
}
