// Package promreg owns registering a component's Prometheus collectors all or none: a
// component that cannot register every metric leaves the registry as it found it, so its
// caller can retry or carry on without it. It also owns the bound on series labelled by
// partition (Keep): which partitions a collector names and which it folds into
// partition="_other". It holds no registry of its own.
package promreg

import "github.com/prometheus/client_golang/prometheus"

// Register registers cs on reg in order, unregistering the ones already done when one fails.
// A nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}
