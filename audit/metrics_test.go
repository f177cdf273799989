package audit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCollector: every series docs/events.md lists is exported with the
// pipeline's values, and a record a sink refused for good shows in
// airlock_audit_rejected_total by sink and reason.
func TestCollector(t *testing.T) {
	p := newTestPipeline(t, Config{StateDir: t.TempDir()})
	for _, e := range sampleEvents() {
		p.Emit(e)
	}
	flush(t, p)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(p.Stats))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			got[mf.GetName()] = c.GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != len(metricHelp) || got["airlock_audit_written_total"] != 15 || got["airlock_audit_accepted_total"] != 15 ||
		got["airlock_audit_dropped_total"] != 0 || got["airlock_audit_last_seq"] != 15 || got["airlock_audit_queue_capacity"] != 65536 {
		t.Fatalf("metrics: %v", got)
	}
	// A record the store refuses for good (a seq another writer took).
	rej := NewCollector(func() Stats {
		return Stats{Rejected: []Rejected{{Sink: "store", Reason: "constraint", Records: 2}}, Transient: 5}
	})
	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(rej)
	if mfs, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		switch mf.GetName() {
		case "airlock_audit_rejected_total":
			m := mf.GetMetric()[0]
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			found = m.GetCounter().GetValue() == 2 && labels["sink"] == "store" && labels["reason"] == "constraint"
		case "airlock_audit_transient_errors_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 5 {
				t.Errorf("transient errors: %v", v)
			}
		}
	}
	if !found {
		t.Errorf("no airlock_audit_rejected_total{sink=store,reason=constraint} 2 in %v", mfs)
	}
}

// collectedCounter is the value of the unlabelled counter name that c
// exports.
func collectedCounter(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
