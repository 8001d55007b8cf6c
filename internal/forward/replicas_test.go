package forward

import (
	"testing"
	"time"
)

// FuzzReplicaSelection drives the replica set the way Send does (begin, then failures and
// answers on the replica picked) from random bytes, against a model that keeps its own
// record of every replica's cool-down and Retry-After. It holds the selection rules: a
// ready replica is never passed over for a waiting one, a failed replica is never picked
// again at once while another is ready, the rotation is round robin, the wait when none
// is ready is for the earliest Retry-After, and the current replica only changes through
// an answer or a counted failover.
func FuzzReplicaSelection(f *testing.F) {
	f.Add([]byte{2, 3, 0, 2, 2, 1, 0, 3, 9, 2, 2, 2, 0})
	f.Add([]byte{0, 0, 2, 2, 2, 2})
	f.Add([]byte{3, 9, 3, 200, 3, 7, 2, 1, 1, 0, 2, 3, 30})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		n := 1 + int(data[0]%4)
		cooldown := time.Duration(1+data[1]%10) * time.Second
		s := &replicas{rs: make([]replica, n), cooldown: cooldown}
		coolUntil := make([]time.Time, n) // the model
		retryAt := make([]time.Time, n)
		ready := func(i int, now time.Time) bool { return !now.Before(coolUntil[i]) && !now.Before(retryAt[i]) }
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var failovers uint64
		r := -1 // the replica the attempt in progress goes to
		for k := 2; k < len(data); k++ {
			b := data[k]
			now = now.Add(time.Duration(b>>3) * 250 * time.Millisecond)
			switch {
			case r < 0: // a Send begins
				cur := s.cur
				r = s.begin(now)
				if ready(cur, now) && r != cur {
					t.Fatalf("begin left ready current %d for %d", cur, r)
				}
				if !ready(cur, now) && ready(r, now) {
					for j := 1; j < n; j++ {
						if i := (cur + j) % n; i == r {
							break
						} else if ready(i, now) {
							t.Fatalf("begin picked %d past ready %d", r, i)
						}
					}
				}
			case b&3 == 0: // the central answered: Send ends
				s.answered(r)
				coolUntil[r], retryAt[r] = time.Time{}, time.Time{}
				if s.cur != r {
					t.Fatalf("current %d after %d answered", s.cur, r)
				}
				r = -1
			case b&3 == 1: // Send gives up after a failure
				s.failed(r, now, time.Time{})
				coolUntil[r], retryAt[r] = now.Add(cooldown), time.Time{}
				r = -1
			default: // a retryable failure, with a Retry-After when b&3 == 3
				var ra time.Time
				if b&3 == 3 {
					ra = now.Add(time.Duration(b>>2) * time.Second)
				}
				next, until, isReady := s.failed(r, now, ra)
				coolUntil[r], retryAt[r] = now.Add(cooldown), ra
				anyReady := false
				for j := 1; j <= n; j++ {
					i := (r + j) % n
					if ready(i, now) {
						anyReady = true
						if !isReady || next != i {
							t.Fatalf("after %d failed: picked %d (ready %v), want first ready %d", r, next, isReady, i)
						}
						break
					}
				}
				if !anyReady {
					if isReady {
						t.Fatalf("after %d failed: %d called ready, none is", r, next)
					}
					beforeNext := true // in the rotation from r+1; those after next may tie with it
					for j := 1; j <= n; j++ {
						i := (r + j) % n
						if i == next {
							beforeNext = false
							continue
						}
						if retryAt[i].Before(retryAt[next]) || beforeNext && retryAt[i].Equal(retryAt[next]) {
							t.Fatalf("after %d failed: picked %d (retry at %v) over %d (retry at %v)", r, next, retryAt[next], i, retryAt[i])
						}
					}
				}
				if n > 1 && isReady && next == r {
					t.Fatalf("replica %d picked again at once right after failing", r)
				}
				if !until.Equal(retryAt[next]) {
					t.Fatalf("until %v, want %d's retry at %v", until, next, retryAt[next])
				}
				if next != r {
					failovers++
				}
				s.move(r, next)
				r = next
			}
			if s.failovers != failovers {
				t.Fatalf("%d failovers counted, model %d", s.failovers, failovers)
			}
		}
	})
}
