package ledger

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Incarnation is what the server knows of one seq space of a gateway (SPEC 5).
type Incarnation struct {
	Gateway string `json:"gateway"`
	// ID is the sender's incarnation, "" for senders older than incarnations.
	ID        string    `json:"incarnation"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	Rows      int64     `json:"rows"`
	// ConcurrentAt is when it was last found sending alongside another incarnation of its
	// gateway (zero: never).
	ConcurrentAt time.Time `json:"concurrent_at,omitzero"`
}

// ConcurrentWindow is how recently another incarnation must have sent for a chunk to count
// as concurrent with it: SPEC 5's "within the same hour".
const ConcurrentWindow = time.Hour

// Concurrent is the rule both ledgers (this one and the cluster's) apply when mine sends at
// now: it is concurrent with another incarnation of its gateway that sent within the window
// and after mine first appeared, that is when the two interleave, which only two live
// machines configured with one gateway_id do. A reinstall never is: the old incarnation stops
// before the new one starts. mine is as known before this chunk (zero FirstSeen: new).
func Concurrent(mine Incarnation, others []Incarnation, now time.Time) bool {
	if mine.FirstSeen.IsZero() {
		return false
	}
	for _, o := range others {
		if o.ID != mine.ID && o.LastSeen.After(mine.FirstSeen) && now.Sub(o.LastSeen) <= ConcurrentWindow {
			return true
		}
	}
	return false
}

// Sighting is what RecordSeen makes of a chunk's incarnation.
type Sighting struct {
	Incarnation // after the chunk
	// Concurrent: the chunk was found concurrent with another incarnation (Concurrent).
	Concurrent bool
}

// sighting is a Record's update of its incarnation, applied in the Record's transaction so
// the rows counted are exactly the rows recorded.
type sighting struct {
	gateway, id string
	at          time.Time
	rows        int64
	out         Sighting // set by apply
}

// RecordSeen is Record that also notes, in the same transaction, that k's incarnation sent
// at at and stored rows rows, and says whether that was concurrent with another incarnation
// of k's gateway.
func (l *Ledger) RecordSeen(k Key, ivs []Interval, checkpoint int64, at time.Time, rows int64) (Sighting, error) {
	s := &sighting{gateway: k.Gateway, id: k.Incarnation, at: at, rows: rows}
	if err := l.record(k, ivs, checkpoint, s); err != nil {
		return Sighting{}, err
	}
	return s.out, nil
}

type seenValue struct {
	First        int64 `json:"first_us"`
	Last         int64 `json:"last_us"`
	Rows         int64 `json:"rows"`
	ConcurrentAt int64 `json:"concurrent_us,omitempty"`
}

func (s *sighting) apply(tx *bolt.Tx) error {
	b := tx.Bucket(incarnationBucket)
	var mine Incarnation
	var others []Incarnation
	// A length-prefixed gateway is a prefix of no other gateway's key.
	prefix := encodeParts(nil, s.gateway)
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		inc, err := decodeIncarnation(k, v)
		if err != nil {
			return err
		}
		if inc.ID == s.id {
			mine = inc
		} else {
			others = append(others, inc)
		}
	}
	concurrent := Concurrent(mine, others, s.at)
	if mine.FirstSeen.IsZero() {
		mine = Incarnation{Gateway: s.gateway, ID: s.id, FirstSeen: s.at}
	}
	if mine.LastSeen.Before(s.at) {
		mine.LastSeen = s.at
	}
	mine.Rows += s.rows
	if concurrent {
		mine.ConcurrentAt = s.at
	}
	v, err := json.Marshal(seenValue{First: mine.FirstSeen.UnixMicro(), Last: mine.LastSeen.UnixMicro(), Rows: mine.Rows, ConcurrentAt: unixMicro(mine.ConcurrentAt)})
	if err != nil {
		return err
	}
	if err := b.Put(encodeParts(nil, s.gateway, s.id), v); err != nil {
		return err
	}
	s.out = Sighting{Incarnation: mine, Concurrent: concurrent}
	return nil
}

func unixMicro(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicro(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

func decodeIncarnation(k, v []byte) (Incarnation, error) {
	var parts [2]string
	rest := k
	for i := range parts {
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return Incarnation{}, fmt.Errorf("corrupt incarnation key %x", k)
		}
		parts[i], rest = string(rest[w:w+int(n)]), rest[w+int(n):]
	}
	var sv seenValue
	if len(rest) != 0 || json.Unmarshal(v, &sv) != nil {
		return Incarnation{}, fmt.Errorf("corrupt incarnation entry %x", k)
	}
	return Incarnation{Gateway: parts[0], ID: parts[1], FirstSeen: fromMicro(sv.First), LastSeen: fromMicro(sv.Last), Rows: sv.Rows, ConcurrentAt: fromMicro(sv.ConcurrentAt)}, nil
}

// Incarnations lists every incarnation the ledger has seen, by gateway then first sighting.
func (l *Ledger) Incarnations() ([]Incarnation, error) {
	var out []Incarnation
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(incarnationBucket).ForEach(func(k, v []byte) error {
			inc, err := decodeIncarnation(k, v)
			if err != nil {
				return err
			}
			out = append(out, inc)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger incarnations: %w", err)
	}
	SortIncarnations(out)
	return out, nil
}

// SortIncarnations orders incs by gateway, then first sighting, then id.
func SortIncarnations(incs []Incarnation) {
	slices.SortFunc(incs, func(a, b Incarnation) int {
		return cmp.Or(cmp.Compare(a.Gateway, b.Gateway), a.FirstSeen.Compare(b.FirstSeen), cmp.Compare(a.ID, b.ID))
	})
}
