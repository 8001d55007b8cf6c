package watermark

import (
	"os"
	"testing"
)

// FuzzHandEditedFile replaces a watermark file with arbitrary bytes behind the store, as an
// operator's editor might. The store must either refuse the file with an error or adopt it
// under a generation above every one it handed out, so that no decision taken before the
// edit can overwrite it, and the adopted state must survive its own next write.
func FuzzHandEditedFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"seq":42,"generation":3}`))
	f.Add([]byte(`{"seq":7}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{"seq":5,"generation":9223372036854775807}`))
	f.Add([]byte(`{"seq":5,"intent":{"from":5,"first":6,"last":9,"rows":4,"id":"x"}}`))
	f.Add([]byte(`{"seq":5,"intent":{"from":5,"first":6,"last":9,"rows":4},"next":{"from":9,"first":10,"last":12,"rows":3}}`))
	f.Add([]byte(`{"seq":5,"intent":{"from":5,"first":6,"last":9,"rows":4},"next":{"from":7,"first":8,"last":12,"rows":3}}`))
	f.Add([]byte(`{"seq":5,"next":{"from":5,"first":6,"last":9,"rows":4}}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, edit []byte) {
		s := Open(t.TempDir(), nil, nil)
		k := Key{Instance: "s", Dataset: "logs", Partition: "source=a"}
		st, err := s.Update(k, 0, func(st *State) error { st.Seq = 10; return nil })
		if err != nil {
			t.Fatal(err)
		}
		path, err := s.Path(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, edit, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(k)
		if err != nil {
			return // refused, with a message naming the file
		}
		if got.Seq < 0 {
			t.Fatalf("adopted a negative seq %d", got.Seq)
		}
		if got.Generation <= st.Generation {
			t.Fatalf("adopted edit under generation %d, not above %d", got.Generation, st.Generation)
		}
		if got.Intent != nil && got.Intent.From != got.Seq {
			t.Fatalf("kept an intent from %d at seq %d", got.Intent.From, got.Seq)
		}
		if got.Next != nil && (got.Intent == nil || got.Next.From != got.Intent.Last) {
			t.Fatalf("kept a unit queued from %d behind the intent %+v", got.Next.From, got.Intent)
		}
		if _, err := s.Update(k, st.Generation, func(*State) error { return nil }); err != ErrStale {
			t.Fatalf("a write decided before the edit was not stale: %v", err)
		}
		next, err := s.Update(k, got.Generation, func(st *State) error { st.Seq++; return nil })
		if err != nil || next.Seq != got.Seq+1 || next.Generation <= got.Generation {
			t.Fatalf("write after adoption: %+v %v", next, err)
		}
	})
}
