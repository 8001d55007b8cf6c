package forward

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hyp-project/hyp/internal/redact"
)

// replicas is where a Client sends: the replica that answered last (sticky, so a healthy
// cluster sees one connection per partition stream), and what each replica's last attempt
// said. Concurrent Sends share it; each Send still has only one attempt in flight.
type replicas struct {
	mu        sync.Mutex
	rs        []replica
	cur       int
	failovers uint64
	cooldown  time.Duration
}

type replica struct {
	url      string // as configured but redacted, for logs, errors, status and metrics
	endpoint string // base URL without trailing slash
	// coolUntil passes the replica over after a failed attempt while another is ready.
	coolUntil time.Time
	// retryAt is the end of the replica's last Retry-After: it is not asked again before
	// then while another replica is ready, and when none is, the wait is for it.
	retryAt   time.Time
	attempted bool
	up        bool // the last attempt got an answer of the central (200 or a refusal)
}

// newReplicas checks urls: each a base URL the protocol's paths can be appended to, and
// no replica twice (a trailing slash does not make another one). A replica's name, what
// logs, errors, status and metric labels call it, is its URL redacted: a password in the
// userinfo is sent, never shown.
func newReplicas(urls []string) (*replicas, error) {
	if len(urls) == 0 {
		return nil, errors.New("forward: no url")
	}
	s := &replicas{rs: make([]replica, len(urls))}
	seen := map[string]string{}
	for i, raw := range urls {
		name := redact.String(raw)
		u, err := redact.ParseURI(raw)
		if err != nil {
			return nil, fmt.Errorf("forward: url %q: %w", name, err)
		}
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("forward: url %q: scheme must be http or https", name)
		case u.Host == "":
			return nil, fmt.Errorf("forward: url %q: no host", name)
		case u.RawQuery != "" || u.ForceQuery:
			return nil, fmt.Errorf("forward: url %q: must not have a query", name)
		case u.Fragment != "":
			return nil, fmt.Errorf("forward: url %q: must not have a fragment", name)
		}
		ep := strings.TrimRight(u.String(), "/")
		if prev, dup := seen[ep]; dup {
			return nil, fmt.Errorf("forward: url %q names the same replica as %q", name, prev)
		}
		seen[ep] = name
		s.rs[i] = replica{url: name, endpoint: ep}
	}
	return s, nil
}

func (r *replica) ready(now time.Time) bool {
	return !now.Before(r.coolUntil) && !now.Before(r.retryAt)
}

// pick returns the first ready replica in round-robin order from, from+1, ... (wrapping),
// and true; when none is ready, the one whose Retry-After ends first (the earliest in that
// order on a tie, so with no Retry-After anywhere the rotation goes on) and false.
func (s *replicas) pick(from int, now time.Time) (int, bool) {
	n := len(s.rs)
	best := from % n
	for k := range n {
		i := (from + k) % n
		if s.rs[i].ready(now) {
			return i, true
		}
		if s.rs[i].retryAt.Before(s.rs[best].retryAt) {
			best = i
		}
	}
	return best, false
}

// begin says where a Send's first attempt goes: the current replica unless it is cooling
// down and another is ready. A first attempt never waits, whatever it picks, as a single
// central's Send never did.
func (s *replicas) begin(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := s.pick(s.cur, now)
	s.cur = i
	return i
}

// answered records that replica i answered for the central (a 200, or a refusal that no
// other replica would answer differently): it is up and stays current.
func (s *replicas) answered(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.rs[i]
	r.attempted, r.up = true, true
	r.coolUntil, r.retryAt = time.Time{}, time.Time{}
	s.cur = i
}

// failed records a retryable failure of replica i at now (retryAt: the end of its
// Retry-After, or zero) and returns where the next attempt should go, that replica's
// retryAt, and whether it may go at once; if not, the wait is until its retryAt when that
// is still ahead, else a ladder step.
func (s *replicas) failed(i int, now, retryAt time.Time) (next int, until time.Time, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.rs[i]
	r.attempted, r.up = true, false
	r.coolUntil, r.retryAt = now.Add(s.cooldown), retryAt
	// i itself comes last in the rotation: with others ready it is skipped, with none it
	// is picked only if its Retry-After ends first.
	next, ready = s.pick(i+1, now)
	return next, s.rs[next].retryAt, ready
}

// move makes to current for the attempt about to go there after one on from failed; a
// move to another replica is a failover. A Send that gives up instead moves nothing.
func (s *replicas) move(from, to int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if to != from {
		s.failovers++
	}
	s.cur = to
}

// ReplicaState is one replica as the Client's last attempt on it left it.
type ReplicaState struct {
	URL       string // redacted: a password in it is masked
	Attempted bool   // false until a chunk was sent to it
	Up        bool   // its last attempt got an answer of the central (200 or a refusal)
}

// State is where a Client sends and what it learnt of each replica.
type State struct {
	Current   string // the replica the next chunk goes to, redacted
	Failovers uint64 // moves from one replica to another after a failed attempt
	Replicas  []ReplicaState
}

// State reports the Client's replicas, for status and metrics.
func (c *Client) State() State {
	s := c.reps
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Current: s.rs[s.cur].url, Failovers: s.failovers, Replicas: make([]ReplicaState, len(s.rs))}
	for i, r := range s.rs {
		st.Replicas[i] = ReplicaState{URL: r.url, Attempted: r.attempted, Up: r.up}
	}
	return st
}
