package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadMetrics count the configuration's reloads (docs/design.md,
// "Identity, transport and operations"), as Prometheus counts its own:
// an alert on the errors, or on a last success older than the file,
// finds a reload that did not take.
type reloadMetrics struct {
	ok, failed  prometheus.Counter
	lastSuccess prometheus.Gauge
}

func newReloadMetrics(reg *prometheus.Registry) *reloadMetrics {
	r := &reloadMetrics{
		ok: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate", Name: "config_reloads_total",
			Help: "Configuration reloads applied (SIGHUP, idemgate reload)."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate",
			Name: "config_reload_errors_total",
			Help: "Configuration reloads refused (an invalid file, or a setting that needs a restart): the " +
				"running configuration was kept."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "idemgate",
			Name: "config_last_reload_success_timestamp_seconds",
			Help: "When the running configuration was loaded: at start, or by the last reload applied."}),
	}
	r.lastSuccess.SetToCurrentTime()
	reg.MustRegister(r.ok, r.failed, r.lastSuccess)
	return r
}

// ConfigReloaded counts a reload: applied (err nil) or refused.
func (m *Metrics) ConfigReloaded(err error) {
	if err != nil {
		m.reload.failed.Inc()
		return
	}
	m.reload.ok.Inc()
	m.reload.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
}
