package watermark

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestUpdateIsCompareAndSet(t *testing.T) {
	s := Open(t.TempDir(), nil, nil)
	k := Key{Instance: "s3", Dataset: "logs", Partition: "source=a/b"}
	st, err := s.Get(k)
	if err != nil || st.Seq != 0 || st.Generation != 0 {
		t.Fatalf("fresh state %+v, %v", st, err)
	}
	u := Unit{From: 0, First: 3, Last: 9, Rows: 4, ID: "x"}
	st, err = s.Update(k, 0, func(s *State) error { s.Intent = &u; return nil })
	if err != nil || st.Generation != 1 || st.Intent == nil {
		t.Fatalf("intent write %+v, %v", st, err)
	}
	// A writer that decided on generation 0 loses.
	if _, err := s.Update(k, 0, func(s *State) error { s.Seq = 100; return nil }); !errors.Is(err, ErrStale) {
		t.Fatalf("stale update: %v", err)
	}
	st, err = s.Update(k, 1, func(s *State) error { s.Seq, s.Intent, s.ExportedRows = 9, nil, 4; return nil })
	if err != nil || st.Seq != 9 || st.Generation != 2 {
		t.Fatalf("advance %+v, %v", st, err)
	}
	// A fresh store (a restarted daemon) reads the same state.
	again, err := Open(s.root, nil, nil).Get(k)
	if err != nil || again.Seq != 9 || again.ExportedRows != 4 || again.Generation != 2 {
		t.Fatalf("reopened %+v, %v", again, err)
	}
	path, _ := s.Path(k)
	if !strings.HasSuffix(path, "s3/watermarks/logs/source=a~2fb.json") {
		t.Fatalf("path %s", path)
	}
}

func TestHandEditIsHonoured(t *testing.T) {
	s := Open(t.TempDir(), nil, nil)
	k := Key{Instance: "fwd", Dataset: "logs", Partition: "source=web"}
	u := Unit{From: 50, First: 51, Last: 60, Rows: 10}
	st, err := s.Update(k, 0, func(s *State) error { s.Seq, s.Intent = 50, &u; return nil })
	if err != nil {
		t.Fatal(err)
	}
	path, _ := s.Path(k)
	b, _ := os.ReadFile(path)
	// The operator moves the seq back and leaves the generation alone.
	edited := strings.Replace(string(b), `"seq": 50`, `"seq": 20`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// The export that decided on the old generation must not write over the edit.
	if _, err := s.Update(k, st.Generation, func(s *State) error { s.Seq = 60; return nil }); !errors.Is(err, ErrStale) {
		t.Fatalf("update over a hand edit: %v", err)
	}
	got, err := s.Get(k)
	if err != nil || got.Seq != 20 || got.Generation <= st.Generation {
		t.Fatalf("after edit %+v, %v", got, err)
	}
	if got.Intent != nil {
		t.Fatalf("intent of the old position survived the edit: %+v", got.Intent)
	}
	// A garbled file is an error naming the file, not a silent reset to 0.
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(k); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("garbled file: %v", err)
	}
}

// A unit queued behind the intent (State.Next) lives and dies with it: a write or a hand
// edit that drops the intent, or moves the seq away from it, drops the queued unit too, and
// HoldsQueue stands on both units.
func TestQueuedUnitGoesWithItsIntent(t *testing.T) {
	s := Open(t.TempDir(), nil, nil)
	k := Key{Instance: "fwd", Dataset: "logs", Partition: "source=web"}
	u := Unit{From: 50, First: 51, Last: 60, Rows: 10}
	v := Unit{From: 60, First: 61, Last: 70, Rows: 10}
	st, err := s.Update(k, 0, func(s *State) error { s.Seq, s.Intent, s.Next = 50, &u, &v; return nil })
	if err != nil || st.Next == nil {
		t.Fatalf("queue: %+v, %v", st, err)
	}
	if ok, err := s.Holds(k, HoldsQueue(50, u, v)); !ok || err != nil {
		t.Fatalf("HoldsQueue of the units written: %v, %v", ok, err)
	}
	if ok, _ := s.Holds(k, HoldsQueue(50, u, Unit{From: 60, First: 61, Last: 69, Rows: 9})); ok {
		t.Fatal("HoldsQueue held for another queued unit")
	}
	// A rewind that only drops the intent drops what was queued behind it.
	st, err = s.Update(k, st.Generation, func(s *State) error { s.Seq, s.Intent = 20, nil; return nil })
	if err != nil || st.Next != nil {
		t.Fatalf("rewind left %+v, %v", st.Next, err)
	}
	if _, err := s.Update(k, st.Generation, func(s *State) error { s.Seq, s.Intent, s.Next = 50, &u, &v; return nil }); err != nil {
		t.Fatal(err)
	}
	// A hand edit that moves the seq leaves neither.
	path, _ := s.Path(k)
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"seq": 50`, `"seq": 20`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(k)
	if err != nil || got.Seq != 20 || got.Intent != nil || got.Next != nil {
		t.Fatalf("after the edit %+v (next %+v), %v", got, got.Next, err)
	}
}

// TestEditDuringAWriteIsHonoured: an operator's edit that lands after a write was decided
// but before its rename (while the new contents are being made durable) fails that write
// instead of being overwritten, for the write an export makes (Update) and for the write
// that adopts an earlier edit; the edit then wins. A removal in that window is an edit too.
func TestEditDuringAWriteIsHonoured(t *testing.T) {
	k := Key{Instance: "fwd", Dataset: "logs", Partition: "source=web"}
	edit := func(t *testing.T, path string, seq int) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		st := map[string]any{}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		st["seq"] = seq
		out, _ := json.Marshal(st)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		during  func(t *testing.T, path string) // lands in the window of the second write
		wantSeq int64
	}{
		{"edit", func(t *testing.T, path string) { edit(t, path, 20) }, 20},
		{"removal", func(t *testing.T, path string) { os.Remove(path) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Open(t.TempDir(), nil, nil)
			st, err := s.Update(k, 0, func(s *State) error { s.Seq = 50; return nil })
			if err != nil {
				t.Fatal(err)
			}
			writes := 0
			s.beforeWrite = func(p string) {
				if writes++; writes == 1 {
					tc.during(t, p)
				}
			}
			if _, err := s.Update(k, st.Generation, func(s *State) error { s.Seq = 60; return nil }); !errors.Is(err, ErrStale) {
				t.Fatalf("update while the file changed under it: %v, want ErrStale", err)
			}
			got, err := s.Get(k)
			if err != nil || got.Seq != tc.wantSeq || got.Generation <= st.Generation {
				t.Fatalf("after the %s: %+v, %v; want seq %d, generation above %d", tc.name, got, err, tc.wantSeq, st.Generation)
			}
		})
	}
	t.Run("while adopting an edit", func(t *testing.T) {
		s := Open(t.TempDir(), nil, nil)
		if _, err := s.Update(k, 0, func(s *State) error { s.Seq = 50; return nil }); err != nil {
			t.Fatal(err)
		}
		path, _ := s.Path(k)
		edit(t, path, 30)
		writes := 0
		s.beforeWrite = func(p string) {
			if writes++; writes == 1 { // the write that adopts seq 30
				edit(t, p, 10)
			}
		}
		got, err := s.Get(k)
		if err != nil || got.Seq != 10 {
			t.Fatalf("an edit made while the first was adopted: %+v, %v; want seq 10", got, err)
		}
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"seq": 10`) {
			t.Fatalf("file after adopting both edits:\n%s", b)
		}
	})
}

func TestGenerationsNeverRepeatAcrossFilesAppearingAndVanishing(t *testing.T) {
	s := Open(t.TempDir(), nil, nil)
	k := Key{Instance: "fwd", Dataset: "logs", Partition: "source=web"}
	path, _ := s.Path(k)
	st, _ := s.Get(k) // missing: generation 0
	// An operator writes a file for a partition the daemon has not written yet.
	if err := os.MkdirAll(path[:strings.LastIndex(path, "/")], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"seq": 6}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(k, st.Generation, func(s *State) error { s.Seq = 3; return nil }); !errors.Is(err, ErrStale) {
		t.Fatalf("update over a file that appeared: %v", err)
	}
	st, err := s.Get(k)
	if err != nil || st.Seq != 6 {
		t.Fatalf("adopted %+v, %v", st, err)
	}
	// The file vanishes and is written again from scratch at generation 1: a writer that
	// decided on the state before the removal must still lose.
	before := st.Generation
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	gone, _ := s.Get(k)
	if gone.Generation <= before {
		t.Fatalf("generation after removal %d, before %d", gone.Generation, before)
	}
	if err := os.WriteFile(path, []byte(`{"seq": 9, "generation": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(k, before, func(s *State) error { s.Seq = 1; return nil }); !errors.Is(err, ErrStale) {
		t.Fatalf("stale writer won after the file was recreated: %v", err)
	}
	if st, _ := s.Get(k); st.Seq != 9 {
		t.Fatalf("seq %d, want the recreated file's 9", st.Seq)
	}
}
