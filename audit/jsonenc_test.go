package audit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// tricky strings exercise every escaping rule of encoding/json.
var tricky = []string{
	"plain.example.test",
	"<script>&amp;\"quoted\"\\back\\",
	"ctl\x00\x01\x08\x0c\n\r\t\x1f\x7f",
	"utf8 é ü 日本 \U0001F600 \u2028 \u2029",
	"bad utf8 \xff\xfe \xc3 \xe2\x82",
	"",
}

// fillAll sets every field reachable from v: strings to s, numbers to n,
// bools true, slices to two elements, pointers to filled values, times to
// at. A field added to the schema is filled too, so the comparison below
// fails until appendEvent writes it.
func fillAll(v reflect.Value, s string, n int64, at time.Time) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n) & 0x7fff)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillAll(p.Elem(), s, n, at)
		v.Set(p)
	case reflect.Slice:
		sl := reflect.MakeSlice(v.Type(), 2, 2)
		fillAll(sl.Index(0), s, n, at)
		fillAll(sl.Index(1), "second", n+1, at)
		v.Set(sl)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(at))
			return
		}
		for i := range v.NumField() {
			fillAll(v.Field(i), s, n, at)
		}
	default:
		panic("fillAll: unhandled kind " + v.Kind().String())
	}
}

// zeroPayloads returns an event with every payload present and zero, so
// every omitempty and null path is taken.
func zeroPayloads() Event {
	e := Event{Time: t0}
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer {
			f.Set(reflect.New(f.Type().Elem()))
		}
	}
	return e
}

func checkEncoding(t *testing.T, name string, e Event) {
	t.Helper()
	want, werr := json.Marshal(e)
	got, gerr := appendEvent(nil, &e)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%s: encoding/json error %v, appendEvent error %v", name, werr, gerr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: appendEvent differs from encoding/json\n got: %s\nwant: %s", name, got, want)
	}
}

func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	for _, e := range sampleEvents() {
		checkEncoding(t, "sample "+string(e.Kind), e)
	}
	ny := time.FixedZone("ny", -5*3600)
	times := []time.Time{t0, t0.Truncate(time.Second), time.Time{}, t0.In(ny), time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i, s := range tricky {
		for j, at := range times {
			var e Event
			fillAll(reflect.ValueOf(&e).Elem(), s, int64(i*1000+j-3), at)
			checkEncoding(t, "filled", e)
		}
	}
	checkEncoding(t, "zero payloads", zeroPayloads())
	var empty Event
	checkEncoding(t, "zero event", empty)
}

// FuzzAppendEvent: for any strings and numbers, appendEvent writes what
// encoding/json writes.
func FuzzAppendEvent(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, int64(i), int64(i*7))
	}
	f.Fuzz(func(t *testing.T, s string, n, ns int64) {
		var e Event
		fillAll(reflect.ValueOf(&e).Elem(), s, n, time.Unix(0, ns).UTC())
		checkEncoding(t, "fuzz", e)
	})
}
