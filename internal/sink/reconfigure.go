package sink

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hyp-project/hyp/internal/config"
)

// liveSettings are the parts of a sink's config a running driver can change without a
// restart: when it runs, which datasets it covers, which sources it withholds and, for an
// iceberg sink, its table upkeep. The destination and credentials are fixed for the life
// of the instance.
type liveSettings struct {
	sched    config.Schedule
	schedule string
	datasets []string
	withhold []string
	maintain config.Maintain
	// maintainSched is maintain.schedule parsed; nil when upkeep runs only on demand.
	maintainSched config.Schedule
	// transform shapes the units decided from now on; units already decided keep the one
	// their intent names.
	transform string
}

// newLive reads a sink config's live settings.
func newLive(cfg config.Sink) (*liveSettings, error) {
	sched, err := config.ParseSchedule(cfg.Schedule)
	if err != nil {
		return nil, err
	}
	live := &liveSettings{sched: sched, schedule: cfg.Schedule, datasets: cfg.Datasets, withhold: cfg.WithholdSources, maintain: cfg.Maintain, transform: cfg.Transform}
	if cfg.Type == "iceberg" && cfg.Maintain.Schedule != "" {
		if live.maintainSched, err = config.ParseSchedule(cfg.Maintain.Schedule); err != nil {
			return nil, fmt.Errorf("maintain.schedule: %w", err)
		}
	}
	return live, nil
}

// Reconfigure applies new sink settings to the running driver (`hyp daemon` on SIGHUP).
// An instance's schedule, datasets, withhold_sources, transform and maintain block change at once:
// the next export unit of a running tick already follows them, and the maintain loop
// recomputes its next run. Adding or removing a sink, or changing any other key (its type,
// format, destination, url, token_file, compression, tls, or an iceberg sink's catalog,
// warehouse, namespace, partition_by or s3), needs a restart: such a change is returned,
// naming the keys, and an instance it concerns keeps every setting it has until then.
func (d *Driver) Reconfigure(sinks map[string]config.Sink) (applied, needRestart []string) {
	for _, x := range d.insts {
		next, ok := sinks[x.name]
		if !ok {
			needRestart = append(needRestart, fmt.Sprintf("sink %s removed", x.name))
			continue
		}
		if keys := fixedChanges(x.cfg, next); len(keys) > 0 {
			needRestart = append(needRestart, fmt.Sprintf("sink %s: %s changed", x.name, strings.Join(keys, ", ")))
			continue
		}
		live, err := newLive(next)
		if err != nil {
			needRestart = append(needRestart, fmt.Sprintf("sink %s: %v", x.name, err))
			continue
		}
		changes := liveChanges(x.live.Load(), live)
		if len(changes) == 0 {
			continue
		}
		x.live.Store(live)
		for _, wake := range []chan struct{}{x.wake, x.maintainWake} {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		for _, c := range changes {
			applied = append(applied, fmt.Sprintf("sink %s: %s", x.name, c))
		}
	}
	for name := range sinks {
		if !slices.ContainsFunc(d.insts, func(x *instance) bool { return x.name == name }) {
			needRestart = append(needRestart, fmt.Sprintf("sink %s added", name))
		}
	}
	slices.Sort(needRestart)
	return applied, needRestart
}

// fixedChanges are the hyp.yaml keys, other than the live ones, whose values differ
// between two configs of a sink.
func fixedChanges(cur, next config.Sink) []string {
	var keys []string
	a, b := reflect.ValueOf(cur), reflect.ValueOf(next)
	for i := range a.NumField() {
		f := a.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch key {
		case "schedule", "datasets", "withhold_sources", "maintain", "transform":
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			keys = append(keys, key)
		}
	}
	return keys
}

// liveChanges describes, key by key, how next differs from cur.
func liveChanges(cur, next *liveSettings) []string {
	var changes []string
	if next.schedule != cur.schedule {
		changes = append(changes, fmt.Sprintf("schedule %q -> %q", cur.schedule, next.schedule))
	}
	if !slices.Equal(next.datasets, cur.datasets) {
		changes = append(changes, fmt.Sprintf("datasets %v -> %v", cur.datasets, next.datasets))
	}
	if !slices.Equal(next.withhold, cur.withhold) {
		changes = append(changes, fmt.Sprintf("withhold_sources %v -> %v", cur.withhold, next.withhold))
	}
	if next.transform != cur.transform {
		changes = append(changes, fmt.Sprintf("transform %q -> %q", cur.transform, next.transform))
	}
	m, n := cur.maintain, next.maintain
	if n.Schedule != m.Schedule {
		changes = append(changes, fmt.Sprintf("maintain.schedule %q -> %q", m.Schedule, n.Schedule))
	}
	if n.Compact != m.Compact {
		changes = append(changes, fmt.Sprintf("maintain.compact %v -> %v", m.Compact, n.Compact))
	}
	if n.ExpireOlderThan != m.ExpireOlderThan {
		changes = append(changes, fmt.Sprintf("maintain.expire_older_than %s -> %s", yamlText(m.ExpireOlderThan), yamlText(n.ExpireOlderThan)))
	}
	if n.RetainLast != m.RetainLast {
		changes = append(changes, fmt.Sprintf("maintain.retain_last %d -> %d", m.RetainLast, n.RetainLast))
	}
	return changes
}

// yamlText is a duration as hyp.yaml spells it ("7d", "12h").
func yamlText(d config.Duration) string {
	v, _ := d.MarshalYAML()
	return fmt.Sprint(v)
}
