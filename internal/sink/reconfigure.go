package sink

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/hyp-project/hyp/internal/config"
)

// liveSettings are the parts of a sink's config a running driver can change without a
// restart: when it runs, which datasets it covers and which sources it withholds. The
// destination and credentials are fixed for the life of the instance.
type liveSettings struct {
	sched    config.Schedule
	schedule string
	datasets []string
	withhold []string
}

// Reconfigure applies new sink settings to the running driver (`hyp daemon` on SIGHUP).
// An instance's schedule, datasets and withhold_sources change at once: the next export
// unit of a running tick already follows them. Adding or removing a sink, or changing its
// type, format, destination, url, token_file or compression, needs a restart: such a change
// is returned, and an instance it concerns keeps every setting it has until then.
func (d *Driver) Reconfigure(sinks map[string]config.Sink) (applied, needRestart []string) {
	for _, x := range d.insts {
		next, ok := sinks[x.name]
		if !ok {
			needRestart = append(needRestart, fmt.Sprintf("sink %s removed", x.name))
			continue
		}
		fixed, nextFixed := x.cfg, next
		fixed.Schedule, fixed.Datasets, fixed.WithholdSources = "", nil, nil
		nextFixed.Schedule, nextFixed.Datasets, nextFixed.WithholdSources = "", nil, nil
		if !reflect.DeepEqual(fixed, nextFixed) {
			needRestart = append(needRestart, fmt.Sprintf("sink %s: type, format, destination, url or token_file changed", x.name))
			continue
		}
		cur := x.live.Load()
		sched, err := config.ParseSchedule(next.Schedule)
		if err != nil {
			needRestart = append(needRestart, fmt.Sprintf("sink %s: %v", x.name, err))
			continue
		}
		var changes []string
		if next.Schedule != cur.schedule {
			changes = append(changes, fmt.Sprintf("schedule %q -> %q", cur.schedule, next.Schedule))
		}
		if !slices.Equal(next.Datasets, cur.datasets) {
			changes = append(changes, fmt.Sprintf("datasets %v -> %v", cur.datasets, next.Datasets))
		}
		if !slices.Equal(next.WithholdSources, cur.withhold) {
			changes = append(changes, fmt.Sprintf("withhold_sources %v -> %v", cur.withhold, next.WithholdSources))
		}
		if len(changes) == 0 {
			continue
		}
		x.live.Store(&liveSettings{sched: sched, schedule: next.Schedule, datasets: next.Datasets, withhold: next.WithholdSources})
		select {
		case x.wake <- struct{}{}:
		default:
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
