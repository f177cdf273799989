package audit

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a pipeline's Stats as Prometheus metrics
// (airlock_audit_*): the appliance's metrics endpoint registers it.
type Collector struct {
	stats    func() Stats
	descs    map[string]*prometheus.Desc
	rejected *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

var metricHelp = map[string]string{
	"queue_depth":              "Events waiting in the audit queue.",
	"queue_capacity":           "Capacity of the audit queue.",
	"accepted_total":           "Events the audit queue accepted.",
	"dropped_total":            "Events dropped because the audit queue stayed full (reported by gap records).",
	"written_total":            "Records written to every audit sink.",
	"lost_total":               "Records given up at shutdown because a sink kept failing.",
	"gaps_total":               "Gap records written.",
	"store_errors_total":       "Failed audit store transactions (each is retried).",
	"stream_errors_total":      "Failed audit stream writes (each is retried).",
	"pruned_total":             "Records deleted by store retention.",
	"last_seq":                 "Sequence number of the newest audit record.",
	"failing":                  "1 while an audit sink is failing and writes are being retried.",
	"transient_errors_total":   "Failed audit writes classed transient (busy, locked, disk full, I/O); each is retried.",
	"dead_letter_errors_total": "Records given up on that the dead-letter file could not take (at its bound and not rotated, or a failed write); each is named by an audit_error record and logged.",
}

// rejectedHelp describes airlock_audit_rejected_total, the one labelled
// series: records a sink refused for good, by sink and reason (each in
// the dead-letter file and named by an audit_error record).
const rejectedHelp = "Audit records a sink refused for good (in the dead-letter file, named by an audit_error record), by sink and reason."

// NewCollector returns a collector calling stats (a Pipeline's Stats) at
// each scrape.
func NewCollector(stats func() Stats) *Collector {
	c := &Collector{stats: stats, descs: map[string]*prometheus.Desc{},
		rejected: prometheus.NewDesc("airlock_audit_rejected_total", rejectedHelp, []string{"sink", "reason"}, nil)}
	for name, help := range metricHelp {
		c.descs[name] = prometheus.NewDesc("airlock_audit_"+name, help, nil, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.rejected
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	failing := 0.0
	if s.Failing {
		failing = 1
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for _, m := range []struct {
		name string
		t    prometheus.ValueType
		v    float64
	}{
		{"queue_depth", gauge, float64(s.QueueDepth)}, {"queue_capacity", gauge, float64(s.QueueCapacity)},
		{"accepted_total", counter, float64(s.Accepted)}, {"dropped_total", counter, float64(s.Dropped)},
		{"written_total", counter, float64(s.Written)}, {"lost_total", counter, float64(s.Lost)},
		{"gaps_total", counter, float64(s.Gaps)}, {"store_errors_total", counter, float64(s.StoreErrors)},
		{"stream_errors_total", counter, float64(s.StreamErrors)}, {"pruned_total", counter, float64(s.Pruned)},
		{"last_seq", gauge, float64(s.LastSeq)}, {"failing", gauge, failing},
		{"transient_errors_total", counter, float64(s.Transient)},
		{"dead_letter_errors_total", counter, float64(s.DeadLetterErrors)},
	} {
		ch <- prometheus.MustNewConstMetric(c.descs[m.name], m.t, m.v)
	}
	for _, r := range s.Rejected {
		ch <- prometheus.MustNewConstMetric(c.rejected, counter, float64(r.Records), r.Sink, r.Reason)
	}
}
