package sink

import (
	"time"

	"testing"

	"github.com/hyp-project/hyp/internal/watermark"
)

func TestNextAction(t *testing.T) {
	u := &watermark.Unit{From: 5, First: 6, Last: 9, Rows: 4}
	for _, tc := range []struct {
		st   watermark.State
		head int64
		want action
	}{
		{watermark.State{Seq: 0}, 0, actIdle},
		{watermark.State{Seq: 9}, 9, actIdle},
		{watermark.State{Seq: 5}, 9, actRead},
		{watermark.State{Seq: 12}, 9, actClamp},
		{watermark.State{Seq: 5, Intent: u}, 9, actReplay},
		{watermark.State{Seq: 5, Intent: u}, 5, actReplay}, // an intent is replayed even at the head
		{watermark.State{Seq: 12, Intent: u}, 9, actReplay},
	} {
		if got := nextAction(tc.st, tc.head); got != tc.want {
			t.Errorf("nextAction(seq %d, intent %v, head %d) = %v, want %v", tc.st.Seq, tc.st.Intent != nil, tc.head, got, tc.want)
		}
	}
}

func TestAfterRead(t *testing.T) {
	for _, tc := range []struct {
		n        int64
		withheld bool
		want     readAction
	}{
		{0, false, actSkip},
		{0, true, actSkip},
		{3, false, actShip},
		{3, true, actWithhold},
	} {
		if got := afterRead(tc.n, tc.withheld); got != tc.want {
			t.Errorf("afterRead(%d, %v) = %v, want %v", tc.n, tc.withheld, got, tc.want)
		}
	}
}

// TestMoveRequirements: each move stands on what the table in cursor.go says, so a write
// that changed only other fields (a gap, a note) never makes it stale, and a rewind or an
// edit of the position or the intent always does.
func TestMoveRequirements(t *testing.T) {
	s := watermark.Open(t.TempDir(), nil, nil)
	k := watermark.Key{Instance: "s", Dataset: "logs", Partition: "source=a"}
	x := &instance{store: s}
	u := watermark.Unit{From: 5, First: 6, Last: 9, Rows: 4, ID: "u"}
	set := func(seq int64, intent *watermark.Unit) {
		t.Helper()
		if _, err := s.Apply(k, watermark.Anyway(), func(st *watermark.State) error {
			st.Seq, st.Intent = seq, intent
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	gap := func() {
		t.Helper()
		if _, err := s.Apply(k, watermark.Anyway(), func(st *watermark.State) error {
			st.Gaps = append(st.Gaps, watermark.Gap{From: 100, To: 101, Rows: 2})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	other := u
	other.Last = 8
	for _, tc := range []struct {
		name   string
		seq    int64
		intent *watermark.Unit
		m      move
		landed bool
	}{
		{"intent at its position", 5, nil, moveIntent(u), true},
		{"intent after a rewind", 3, nil, moveIntent(u), false},
		{"intent over another", 5, &other, moveIntent(u), false},
		{"settle", 5, &u, moveSettle(inFlight{5, u}, 4, 0, time.Unix(1, 0), nil), true},
		{"settle after a rewind that kept the intent", 2, &u, moveSettle(inFlight{5, u}, 4, 0, time.Unix(1, 0), nil), false},
		{"settle after a rewind that cleared it", 5, nil, moveSettle(inFlight{5, u}, 4, 0, time.Unix(1, 0), nil), false},
		{"settle of another unit", 5, &other, moveSettle(inFlight{5, u}, 4, 0, time.Unix(1, 0), nil), false},
		{"skip", 5, nil, moveSkip(5, 9), true},
		{"clamp", 12, nil, moveClamp(12, 9), true},
		{"withhold", 5, nil, moveWithhold(u), true},
		{"drop", 5, &u, moveDrop(inFlight{5, u}), true},
		{"note", 3, &other, moveNote("x"), true},
	} {
		set(tc.seq, tc.intent)
		gap() // retention's bookkeeping between the decision and the write
		_, landed, err := x.advance(k, tc.m)
		if err != nil || landed != tc.landed {
			t.Errorf("%s: landed %v, %v; want %v", tc.name, landed, err, tc.landed)
		}
	}
}
