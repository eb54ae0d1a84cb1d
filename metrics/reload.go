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

// tlsSettings are the TLS settings whose files rotate (config.TLS).
var tlsSettings = []string{"tls", "metrics_tls"}

// tlsMetrics count the rotations of the listeners' TLS files: a rotation
// refused (a certificate without its key, a client_ca file without a
// certificate) keeps the previous files, which expire in time; an alert
// on the errors finds it first.
type tlsMetrics struct{ ok, failed *prometheus.CounterVec }

func newTLSMetrics(m *Metrics) *tlsMetrics {
	t := &tlsMetrics{
		ok: counter("tls_reloads_total", "Rotations of the TLS files applied (the certificate, its key or the "+
			"client CAs written anew), by setting.", "setting"),
		failed: counter("tls_reload_errors_total", "Rotations of the TLS files refused (a certificate without its "+
			"key, a client_ca without a certificate, …): the files in hand were kept.", "setting"),
	}
	for _, s := range tlsSettings {
		t.ok.WithLabelValues(s)
		t.failed.WithLabelValues(s)
	}
	m.Register(t.ok, t.failed)
	return t
}

// TLSReloaded counts a rotation of setting's files: applied (err nil) or
// refused.
func (m *Metrics) TLSReloaded(setting string, err error) {
	if err != nil {
		m.tls.failed.WithLabelValues(setting).Inc()
		return
	}
	m.tls.ok.WithLabelValues(setting).Inc()
}
