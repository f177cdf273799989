package audit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

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
}
