package serve

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"airlock/audit"
)

// Metrics are the appliance's Prometheus metrics. Every label takes its
// values from a bounded set: verdicts, event kinds, the policy's category
// names (otherCategory past maxCategories), drop reasons and DNS rcodes.
type Metrics struct {
	reg        *prometheus.Registry
	decisions  *prometheus.CounterVec
	dnsQueries *prometheus.CounterVec
	drops      *prometheus.CounterVec
	execs      *prometheus.HistogramVec
	policyLoad *prometheus.CounterVec

	categories map[string]bool
}

const (
	maxCategories = 64
	otherCategory = "other"
)

// auditStats is the audit pipeline's counters (audit.Pipeline.Stats).
type auditStats func() audit.Stats

// newMetrics registers the appliance's metrics on a fresh registry. stats
// may be nil (no audit pipeline).
func newMetrics(stats auditStats) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), categories: map[string]bool{}}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "decisions_total",
		Help: "Egress decisions (flows and requests) by verdict and category.",
	}, []string{"kind", "verdict", "category"})
	m.dnsQueries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "dns_queries_total",
		Help: "DNS queries answered, by verdict and response code.",
	}, []string{"verdict", "rcode"})
	m.drops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "kernel_drops_total",
		Help: "Packets the kernel path dropped, by reason.",
	}, []string{"reason"})
	m.execs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "exec_duration_seconds",
		Help:    "Duration of commands run in sandboxes, by outcome.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	}, []string{"outcome"})
	m.policyLoad = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "policy_loads_total",
		Help: "Policy loads and reloads, by outcome.",
	}, []string{"action"})
	m.reg.MustRegister(m.decisions, m.dnsQueries, m.drops, m.execs, m.policyLoad,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if stats != nil {
		m.reg.MustRegister(audit.NewCollector(stats))
	}
	return m
}

// sandboxCount registers the sandboxes gauge, read from f at scrape time.
func (m *Metrics) sandboxCount(f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "airlock", Name: "sandboxes", Help: "Sandboxes known to the appliance now.",
	}, f))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// category bounds the category label: the first maxCategories names seen
// are kept, later ones become "other". Callers hold the tap's lock.
func (m *Metrics) category(c string) string {
	if c == "" {
		return "none"
	}
	if m.categories[c] {
		return c
	}
	if len(m.categories) >= maxCategories {
		return otherCategory
	}
	m.categories[c] = true
	return c
}

// observe counts one event. Callers hold the tap's lock.
func (m *Metrics) observe(e *audit.Event) {
	switch e.Kind {
	case audit.KindFlow:
		if e.Flow != nil && e.Flow.Stage == "decision" {
			m.decisions.WithLabelValues("flow", verdictLabel(e.Verdict), m.category(e.Category)).Inc()
		}
	case audit.KindHTTP:
		m.decisions.WithLabelValues("http", verdictLabel(e.Verdict), m.category(e.Category)).Inc()
	case audit.KindDNS:
		rcode := "other"
		if e.DNS != nil && len(e.DNS.RCode) <= 12 {
			rcode = e.DNS.RCode
		}
		m.dnsQueries.WithLabelValues(verdictLabel(e.Verdict), rcode).Inc()
	case audit.KindDrop:
		m.drops.WithLabelValues(reasonLabel(e.Reason)).Add(float64(dropCount(e)))
	case audit.KindExec:
		m.observeExec(e)
	case audit.KindPolicy:
		if e.Policy != nil {
			m.policyLoad.WithLabelValues(e.Policy.Action).Inc()
		}
	}
}

func (m *Metrics) observeExec(e *audit.Event) {
	if e.Exec == nil || e.Exec.Stage != "finished" {
		return
	}
	outcome := "exited"
	switch {
	case e.Exec.TimedOut:
		outcome = "timed_out"
	case e.Exec.Killed:
		outcome = "killed"
	}
	m.execs.WithLabelValues(outcome).Observe(float64(e.Exec.DurationMS) / 1000)
}

func dropCount(e *audit.Event) uint64 {
	if e.Drop == nil || e.Drop.Count == 0 {
		return 1
	}
	return e.Drop.Count
}

func verdictLabel(v string) string {
	switch v {
	case "allow", "deny", "ask", "audit":
		return v
	case "":
		return "none"
	}
	return "other"
}

// reasonLabel bounds drop reasons to short identifier-like strings.
func reasonLabel(r string) string {
	if r == "" {
		return "unknown"
	}
	if len(r) > 32 {
		return "other"
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "other"
		}
	}
	return r
}
