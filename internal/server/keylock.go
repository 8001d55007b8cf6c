package server

import (
	"context"
	"sync"

	"github.com/hyp-project/hyp/internal/ledger"
)

// keyLocks serialises requests per ledger key (the single node locks a key without its
// incarnation: a server cache partition), so that a seq is found missing and stored by one
// request at a time. Entries exist only while some request holds or waits for them, or
// while a key needs repair.
type keyLocks struct {
	mu sync.Mutex
	m  map[ledger.Key]*keyLock
}

type keyLock struct {
	key  ledger.Key
	sem  chan struct{} // a one-slot channel, so waiting can give up with the request
	refs int           // holders and waiters, under keyLocks.mu
	// dirty means a failure left unknown whether the cache holds rows the ledger lacks; the
	// next holder repairs the key before serving it. Only the holder reads or writes it.
	dirty bool
}

// lock waits for the key's lock, or for ctx to end.
func (ks *keyLocks) lock(ctx context.Context, k ledger.Key) (*keyLock, error) {
	ks.mu.Lock()
	if ks.m == nil {
		ks.m = map[ledger.Key]*keyLock{}
	}
	l := ks.m[k]
	if l == nil {
		l = &keyLock{key: k, sem: make(chan struct{}, 1)}
		ks.m[k] = l
	}
	l.refs++
	ks.mu.Unlock()
	select {
	case l.sem <- struct{}{}:
		return l, nil
	case <-ctx.Done():
		ks.release(l)
		return nil, ctx.Err()
	}
}

func (ks *keyLocks) unlock(l *keyLock) {
	// Drop the reference before freeing the slot, while no one else can be touching dirty.
	ks.release(l)
	<-l.sem
}

func (ks *keyLocks) release(l *keyLock) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	l.refs--
	if l.refs == 0 && !l.dirty {
		delete(ks.m, l.key)
	}
}
