package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// A replica groups the chunks that reach it within a window into one store (SPEC 5): one
// staged data file per table and one PostgreSQL transaction for all of them, so the files
// grow with the rows, not with the gateways. The window opens with a group's first chunk
// and closes after Options.GroupWindow or once the group holds Options.GroupBytes; while one
// group's transaction runs the next one gathers, so a slow store makes the next group
// larger rather than the queue longer. Each chunk is answered when its group's transaction
// ends: stored only once it committed, as a chunk stored alone.
//
// When is decided by limits.decide, from the open group's state alone; gather carries the
// decisions out.

// limits are the grouping window.
type limits struct {
	window time.Duration // 0: a group closes as soon as no store is running
	bytes  int64
}

// gathering is the open group as decide sees it.
type gathering struct {
	chunks  int
	bytes   int64     // the rows' JSON text, or their records' buffers (encode)
	opened  time.Time // when its first chunk arrived
	storing bool      // the previous group's transaction has not ended
}

// decide says whether the open group is stored now and, when not, when to ask again (zero:
// only when a chunk arrives or the running store ends). A store runs one at a time: its
// locks and its file are the group's, and the next group takes what arrived meanwhile.
func (l limits) decide(g gathering, now time.Time) (store bool, wake time.Time) {
	switch {
	case g.chunks == 0 || g.storing:
		return false, time.Time{}
	case g.bytes >= l.bytes || !now.Before(g.opened.Add(l.window)):
		return true, time.Time{}
	}
	return false, g.opened.Add(l.window)
}

// pending is a chunk handed to gather, its rows already encoded (so a bad row fails only its
// own chunk, before it joins a group); the group owns recs from then on.
type pending struct {
	ch    Chunk
	part  string
	recs  []arrow.RecordBatch
	bytes int64
	done  chan outcome // buffered: the group never waits for a caller that gave up
}

type outcome struct {
	st  Stored
	err error
}

var errClosing = errors.New("cluster: the replica is closing")

// gather runs the grouping until ctx ends; then it answers the chunks still gathering with
// errClosing and waits for a running store to end.
func (c *Cluster) gather(ctx context.Context) {
	defer close(c.gathered)
	var open []*pending
	var g gathering
	stored := make(chan struct{})
	for {
		now := time.Now()
		store, wake := c.limits.decide(g, now)
		if store {
			group := open
			open, g = nil, gathering{storing: true}
			go func() {
				c.storeGroup(context.WithoutCancel(ctx), group)
				stored <- struct{}{}
			}()
			continue
		}
		var timer <-chan time.Time
		if !wake.IsZero() {
			timer = time.After(wake.Sub(now))
		}
		select {
		case <-ctx.Done():
			for _, p := range open {
				releaseAll(p.recs)
				p.done <- outcome{err: errClosing}
			}
			if g.storing {
				<-stored
			}
			return
		case p := <-c.arrive:
			if g.chunks == 0 {
				g.opened = time.Now()
			}
			open = append(open, p)
			g.chunks++
			g.bytes += p.bytes
		case <-stored:
			g.storing = false
		case <-timer:
		}
	}
}

// storeGroup stores the group and answers each of its chunks. A group that fails is stored
// again chunk by chunk: one chunk whose rows cannot join the table fails only itself.
func (c *Cluster) storeGroup(ctx context.Context, group []*pending) {
	defer func() {
		for _, p := range group {
			releaseAll(p.recs)
		}
	}()
	c.metrics.groupChunks.Observe(float64(len(group)))
	sts, err := c.storeTogether(ctx, group)
	if err == nil {
		for i, p := range group {
			p.done <- outcome{st: sts[i]}
		}
		return
	}
	if len(group) == 1 {
		group[0].done <- outcome{err: err}
		return
	}
	c.log.Warn("cluster: a group of chunks failed to store; storing them one by one", "chunks", len(group), "err", err)
	for _, p := range group {
		sts, err := c.storeTogether(ctx, []*pending{p})
		if err != nil {
			p.done <- outcome{err: err}
		} else {
			p.done <- outcome{st: sts[0]}
		}
	}
}
