package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const testNode = "node-a.example.test"

// ocsfEvents is sampleEvents plus the kinds it lacks, and a kind this
// mapping does not know (as a kind added later would be).
func ocsfEvents() []Event {
	evs := sampleEvents()
	at := t0.Add(20 * time.Second)
	e := New(KindSecretReflected, "sb-1")
	e.Time, e.ID, e.Verdict, e.Rule, e.Category = at, "h9", "deny", "proxy.reflect", "api"
	e.SecretReflected = &SecretReflected{Secret: "API_TOKEN", Host: "api.example.test", Position: "body", Offset: 12, Action: "refused"}
	evs = append(evs, e)
	e = New(KindLockdown, "")
	e.Time, e.Reason = at.Add(time.Second), "incident 7"
	e.Lockdown = &Lockdown{Action: "engaged", Scope: "all", By: "root (uid 0)"}
	evs = append(evs, e)
	e = New(KindRefusal, "")
	e.Time, e.Reason = at.Add(2*time.Second), "scope sandbox:create missing"
	e.Refusal = &Refusal{Principal: "ci", Action: "POST /v1/sandboxes", Status: 403, Code: "forbidden", Peer: "198.18.0.50:5555", RequestID: "r1"}
	evs = append(evs, e)
	e = New(KindDNS, "sb-1")
	e.Time, e.Verdict, e.Rule, e.Pid, e.Comm = at.Add(3*time.Second), "allow", "categories.git.hosts[0] (p.toml:3:1)", 42, "git"
	e.DNS = &DNS{QName: "git.example.test.", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.7.7"},
		Client: "198.18.0.2:5353", Server: "198.18.0.1:53", LatencyUS: 900}
	evs = append(evs, e)
	e = New(KindHTTP, "sb-1")
	e.Time, e.Verdict, e.Reason = at.Add(5*time.Second), "deny", "bad \xff byte"
	e.HTTP = &HTTP{Method: "GET", Scheme: "http", Host: "x\xfe.example.test:8080", Path: "/a\xff\xfeb<&>", Status: 403}
	evs = append(evs, e)
	e = New(Kind("ingress"), "sb-1")
	e.Time, e.Verdict = at.Add(6*time.Second), "allow"
	evs = append(evs, e)
	return evs
}

// streamOf runs events through a pipeline writing the given flavor to a
// buffer, and returns the stream's lines.
func streamOf(t *testing.T, format Format, evs []Event) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	p := newTestPipeline(t, Config{StreamWriter: &buf, StreamFormat: format, Node: testNode, ProductVersion: "test"})
	for _, e := range evs {
		p.Emit(e)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
}

// The OCSF encoding of every event kind, golden (go test -run
// TestOCSFGolden -update rewrites testdata/ocsf.jsonl.golden).
func TestOCSFGolden(t *testing.T) {
	got := bytes.Join(streamOf(t, FormatOCSF, ocsfEvents()), []byte("\n"))
	golden := filepath.Join("testdata", "ocsf.jsonl.golden")
	if *updateGolden {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got)+"\n", "\n")); d != "" {
		t.Errorf("%s (-want +got; a deliberate change to the mapping also bumps ocsfMapping):\n%s", golden, d)
	}
}

// ocsfRecord is what the consistency test reads of an OCSF line.
type ocsfRecord struct {
	ClassUID     *int   `json:"class_uid"`
	ClassName    string `json:"class_name"`
	CategoryUID  *int   `json:"category_uid"`
	CategoryName string `json:"category_name"`
	ActivityID   *int   `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	TypeUID      *int   `json:"type_uid"`
	TypeName     string `json:"type_name"`
	SeverityID   *int   `json:"severity_id"`
	Severity     string `json:"severity"`
	Time         *int64 `json:"time"`
	ActionID     *int   `json:"action_id"`
	Disposition  *int   `json:"disposition_id"`
	Device       struct{ Hostname string }
	Metadata     struct {
		Version  string
		Sequence uint64
		Product  struct{ Name, Version string }
	}
	Unmapped struct {
		Airlock json.RawMessage
	}
}

// Every OCSF record's uids agree with each other and with the class
// table, and its time, sequence and node are the Airlock record's.
func TestOCSFUidsConsistent(t *testing.T) {
	for i, l := range streamOf(t, FormatOCSF, ocsfEvents()) {
		var o ocsfRecord
		if err := json.Unmarshal(l, &o); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if o.ClassUID == nil || o.CategoryUID == nil || o.ActivityID == nil || o.TypeUID == nil || o.SeverityID == nil || o.Time == nil {
			t.Fatalf("line %d: a required uid is missing: %s", i+1, l)
		}
		c, ok := ocsfClasses[*o.ClassUID]
		switch {
		case !ok:
			t.Errorf("line %d: class_uid %d is not in the class table", i+1, *o.ClassUID)
		case *o.CategoryUID != c.category || *o.CategoryUID != *o.ClassUID/1000 || o.CategoryName != c.catName:
			t.Errorf("line %d: category %d %q does not go with class %d", i+1, *o.CategoryUID, o.CategoryName, *o.ClassUID)
		case *o.TypeUID != *o.ClassUID*100+*o.ActivityID:
			t.Errorf("line %d: type_uid %d != class_uid*100+activity_id (%d, %d)", i+1, *o.TypeUID, *o.ClassUID, *o.ActivityID)
		case o.ClassName != c.name || o.ActivityName != c.activities[*o.ActivityID] || o.ActivityName == "" ||
			o.TypeName != c.name+": "+o.ActivityName:
			t.Errorf("line %d: names %q %q %q do not match the uids", i+1, o.ClassName, o.ActivityName, o.TypeName)
		case o.Severity != ocsfSeverityNames[*o.SeverityID]:
			t.Errorf("line %d: severity %q for id %d", i+1, o.Severity, *o.SeverityID)
		}
		var a Event
		if err := json.Unmarshal(o.Unmapped.Airlock, &a); err != nil {
			t.Fatalf("line %d: unmapped.airlock: %v", i+1, err)
		}
		if *o.Time != a.Time.UnixMilli() || o.Metadata.Sequence != a.Seq || o.Device.Hostname != a.Node ||
			o.Metadata.Version != OCSFVersion || o.Metadata.Product.Name != "Airlock" || o.Metadata.Product.Version != "test" {
			t.Errorf("line %d: time/sequence/node/metadata disagree with the record: %s", i+1, l)
		}
		decided := a.Verdict != "" || a.Kind == KindDrop || a.Kind == KindRefusal
		if decided != (o.ActionID != nil && o.Disposition != nil) {
			t.Errorf("line %d: verdict %q but action_id/disposition_id %v/%v", i+1, a.Verdict, o.ActionID, o.Disposition)
		}
	}
}

// The classes the brief names: flows and drops are Network Activity,
// requests HTTP Activity, queries DNS Activity; deny is Denied/Blocked.
func TestOCSFClassOfEachKind(t *testing.T) {
	want := map[Kind]int{KindFlow: 4001, KindDrop: 4001, KindHTTP: 4002, KindDNS: 4003, KindExec: 1007,
		KindRefusal: 6003, KindPolicy: 0, KindLifecycle: 0, KindGap: 0, Kind("ingress"): 0}
	for _, e := range ocsfEvents() {
		if w, ok := want[e.Kind]; ok && classify(&e).class != w {
			t.Errorf("%s: class %d, want %d", e.Kind, classify(&e).class, w)
		}
		if oc, ok := outcome(&e); e.Verdict == "deny" && (!ok || oc.action != 2 || oc.disposition != 2 && oc.disposition != 6) {
			t.Errorf("%s deny: outcome %+v", e.Kind, oc)
		}
	}
}

// The node name is in every record of both flavors, and in the store.
func TestNodeInEveryRecord(t *testing.T) {
	for _, f := range []Format{FormatAirlock, FormatOCSF} {
		for i, l := range streamOf(t, f, ocsfEvents()) {
			rec, err := chainedRecord(l)
			if err != nil {
				t.Fatal(err)
			}
			var e Event
			if err := json.Unmarshal(rec, &e); err != nil || e.Node != testNode {
				t.Errorf("%s line %d: node %q (%v): %s", f, i+1, e.Node, err, l)
			}
			if f == FormatOCSF && !bytes.Contains(l, []byte(`"device":{"hostname":"`+testNode+`"`)) {
				t.Errorf("ocsf line %d: no device.hostname: %s", i+1, l)
			}
		}
	}
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir, Node: testNode})
	p.Emit(sampleEvents()[3])
	flush(t, p)
	n := 0
	if err := p.Store().Each(t.Context(), Query{}, func(e Event) error {
		n++
		if e.Node != testNode {
			t.Errorf("store record node %q", e.Node)
		}
		return nil
	}); err != nil || n != 1 {
		t.Fatalf("store: %d records, %v", n, err)
	}
}

// An OCSF stream reads back as the very records of the airlock flavor,
// verifies as a chain, and continues its chain after a restart.
func TestOCSFReadBackAndVerify(t *testing.T) {
	evs := ocsfEvents()
	read := func(format Format) (string, []Event) {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		for _, half := range [][]Event{evs[:5], evs[5:]} { // two runs: the second resumes the chain
			p := newTestPipeline(t, Config{StreamPath: path, StreamFormat: format, Node: testNode})
			for _, e := range half {
				p.Emit(e)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
		var got []Event
		if err := ReadJSONL([]string{path}, nil, func(e Event) error { got = append(got, e); return nil }); err != nil {
			t.Fatal(err)
		}
		return path, got
	}
	_, want := read(FormatAirlock)
	path, got := read(FormatOCSF)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("read back (-airlock flavor +ocsf flavor):\n%s", d)
	}
	res, err := Verify(path)
	if err != nil || !res.OK() || res.Records != len(evs) || res.FirstSeq != 1 {
		t.Fatalf("verify: %v %+v", err, res)
	}
	orig := readLines(t, path)
	for name, edit := range map[string]func(l []byte) []byte{
		"embedded record": func(l []byte) []byte {
			i := bytes.Index(l, []byte(`"unmapped"`))
			return append(l[:i:i], bytes.Replace(l[i:], []byte(`"sb-1"`), []byte(`"sb-X"`), 1)...)
		},
		"mapped field": func(l []byte) []byte {
			return bytes.Replace(l, []byte(`"disposition_id":2,`), []byte(`"disposition_id":1,`), 1)
		},
	} {
		lines := append([][]byte(nil), orig...)
		lines[7] = edit(bytes.Clone(lines[7])) // the denied flow decision
		if bytes.Equal(lines[7], orig[7]) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		writeLines(t, path, lines)
		if res, err := Verify(path); err != nil || res.OK() || res.Problems[0].Kind != "modified" || res.Problems[0].Line != 8 {
			t.Errorf("an edited %s: %v %+v", name, err, res)
		}
	}
}

// A line of another mapping version is not re-derived (a newer Airlock
// may map differently), only noted; its chained record is still checked.
func TestOCSFOtherMappingNoted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	lines := streamOf(t, FormatOCSF, ocsfEvents()[:3])
	for i := range lines {
		lines[i] = bytes.Replace(lines[i], []byte(`"ocsf_mapping":1,`), []byte(`"ocsf_mapping":0,`), 1)
	}
	lines[1] = bytes.Replace(lines[1], []byte(`"severity_id":1,`), []byte(`"severity_id":2,`), 1)
	writeLines(t, path, lines)
	res, err := Verify(path)
	if err != nil || !res.OK() || !strings.Contains(res.Notes[len(res.Notes)-1], "3 OCSF lines (the first at "+path+":1) are of another mapping version") {
		t.Fatalf("verify: %v %+v", err, res)
	}
}

// A line that is OCSF but lost its Airlock record (a shipper dropped
// unmapped) is refused with its place, by logs and by verify.
func TestOCSFWithoutRecordRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	writeLines(t, path, [][]byte{[]byte(`{"class_uid":4001,"activity_id":1,"time":1,"metadata":{"version":"1.3.0"}}`)})
	err := ReadJSONL([]string{path}, nil, func(Event) error { return nil })
	if !errors.Is(err, errOCSFWithoutRecord) || !strings.Contains(err.Error(), path+":1:") {
		t.Fatalf("read: %v", err)
	}
	res, err := Verify(path)
	if err != nil || res.OK() || res.Problems[0].Kind != "invalid" || !strings.Contains(res.Problems[0].Msg, "unmapped.airlock") {
		t.Fatalf("verify: %v %+v", err, res)
	}
}

// FuzzChainedRecord: any line gives a record, itself, or the precise
// error, never a panic; a record it extracts is a JSON object.
func FuzzChainedRecord(f *testing.F) {
	f.Add([]byte(`{"schema":1,"kind":"dns"}`))
	f.Add([]byte(`{"class_uid":4003,"unmapped":{"airlock":{"schema":1,"kind":"dns","seq":1}}}`))
	f.Add([]byte(`{"class_uid":4003}`))
	f.Add([]byte(`{"unmapped":{"airlock":[1]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		rec, err := chainedRecord(raw)
		if err != nil {
			return
		}
		if !bytes.Equal(rec, raw) && !json.Valid(rec) {
			t.Fatalf("extracted an invalid record %q from %q", rec, raw)
		}
	})
}

// FuzzOCSFRederive: for any strings and numbers in any kind, the OCSF
// line the encoder writes is the one Verify re-derives from the record
// it carries (no false "modified", whatever a sandbox put in a name).
func FuzzOCSFRederive(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, int64(i), uint8(i))
	}
	kinds := []Kind{KindDNS, KindFlow, KindHTTP, KindDrop, KindExec, KindRefusal, KindLifecycle, Kind("other")}
	f.Fuzz(func(t *testing.T, s string, n int64, k uint8) {
		var e Event
		fillAll(reflect.ValueOf(&e).Elem(), s, n, time.Unix(0, n).UTC())
		e.Kind = kinds[int(k)%len(kinds)]
		e.Schema = SchemaVersion
		c := encoder{node: s, ocsf: true, version: s}
		r, err := c.encode(e)
		if err != nil {
			return // a time encoding/json refuses: not encodable in either flavor
		}
		l, err := newSequencer().next(r)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(l.stream) {
			t.Fatalf("not JSON: %s", l.stream)
		}
		if ok, known := ocsfDerived(l.stream, l.raw); !ok || !known {
			t.Fatalf("re-derived line differs (%v %v):\n%s", ok, known, l.stream)
		}
	})
}
