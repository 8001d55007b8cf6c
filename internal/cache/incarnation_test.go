package cache

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestChooseIncarnation(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name          string
		fresh         bool
		file, fromSeq *string
		want          string
		create        bool
	}{
		{"a new cache", true, nil, nil, "", true},
		{"seqs start again at 1 under a left-over file", true, s("old"), s("old"), "", true},
		{"the file", false, s("abc"), s("other"), "abc", false},
		{"the file lost, seq.json's copy", false, nil, s("abc"), "abc", false},
		{"a cache from before incarnations", false, nil, nil, "", false},
		{"a cache from before incarnations, its choice written", false, s(""), s(""), "", false},
	} {
		id, create := chooseIncarnation(tc.fresh, tc.file, tc.fromSeq)
		if id != tc.want || create != tc.create {
			t.Errorf("%s: got %q create=%v, want %q create=%v", tc.name, id, create, tc.want, tc.create)
		}
	}
}

func TestIncarnationLifecycle(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cache")
	open := func() *Cache {
		t.Helper()
		c, err := Open(ctx, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open()
	first := c.Incarnation()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(first) {
		t.Fatalf("a new cache's incarnation %q", first)
	}
	if _, err := c.Ingest("logs", "a", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c = open(); c.Incarnation() != first {
		t.Fatalf("reopened: %q, want %q", c.Incarnation(), first)
	}
	_ = c.Close(ctx)
	// Either copy alone keeps the id.
	if err := os.Remove(layout(dir).incarnation()); err != nil {
		t.Fatal(err)
	}
	if c = open(); c.Incarnation() != first {
		t.Fatalf("without the incarnation file: %q, want %q", c.Incarnation(), first)
	}
	_ = c.Close(ctx)
	if b, err := os.ReadFile(layout(dir).incarnation()); err != nil || string(b) != first+"\n" {
		t.Fatalf("the incarnation file was not written back: %q %v", b, err)
	}
	// A bad file is refused, never replaced.
	if err := os.WriteFile(layout(dir).incarnation(), []byte("not valid!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Open(ctx, dir, Options{}); err == nil {
		_ = c.Close(ctx)
		t.Fatal("a cache with a damaged incarnation file opened")
	}
	// A wiped cache is a new seq space.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	c = open()
	defer c.Close(ctx)
	if c.Incarnation() == first || c.Incarnation() == "" {
		t.Fatalf("a wiped cache kept incarnation %q", c.Incarnation())
	}
}

// A cache made before incarnations (seqs issued, no incarnation anywhere) keeps sending as
// "", which is what the server's ledger knows its rows as.
func TestIncarnationOfAnOlderCache(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ingest("logs", "a", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What an older build left: seq.json without the copy, no incarnation file.
	if err := os.WriteFile(layout(dir).seqState(), []byte(`{"reserved":1048577}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(layout(dir).incarnation()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c, err := Open(ctx, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Incarnation() != "" {
			t.Fatalf("an older cache's incarnation %q, want \"\"", c.Incarnation())
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
