package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/ledger"
)

// TestIncarnationsCrashBetweenAppendAndRecord: two incarnations of one gateway send the same
// source at once, so their rows share one server cache partition and its ledger checkpoint.
// The server "crashes" (its files are copied as they are) while the first chunk's rows are in
// the cache and its ledger record is not made yet. However the second chunk fared, the first
// one, sent again after the restart, must be all duplicates: Recover reads the rows above
// the checkpoint, so no Record may raise the checkpoint over rows not yet recorded.
func TestIncarnationsCrashBetweenAppendAndRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func(dir string) (*cache.Cache, *ledger.Ledger) {
		c, err := cache.Open(ctx, filepath.Join(dir, "cache"), cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		led, err := ledger.Open(filepath.Join(dir, "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = led.Close(); _ = c.Close(ctx) })
		return c, led
	}
	c, led := open(dir)
	appended, resume := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	// The first chunk stops between its append and its ledger record; any other goes on.
	hold := func() {
		if held.CompareAndSwap(false, true) {
			close(appended)
			<-resume
		}
	}
	o := Options{Tokens: []Token{{Secret: testToken}}, MaxBodyBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	h, err := newHandler(&localKeeper{store: c, led: led, afterAppend: hold}, cacheRows, o)
	if err != nil {
		t.Fatal(err)
	}
	chunkOf := func(incarnation string) *http.Request {
		return request(1, 10, rows(seqRange(1, 10)...), func(r *http.Request) { r.Header.Set(headerIncarnation, incarnation) })
	}
	serve := func(h http.Handler, r *http.Request, done chan<- *httptest.ResponseRecorder) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		done <- w
	}
	doneA, doneB := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go serve(h, chunkOf("inc-a"), doneA)
	<-appended
	go serve(h, chunkOf("inc-b"), doneB)
	var b *httptest.ResponseRecorder
	select { // the second chunk is stored and recorded, or waits for the first
	case b = <-doneB:
	case <-time.After(500 * time.Millisecond):
	}
	crashed := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", crashed).CombinedOutput(); err != nil {
		t.Fatalf("copying the server's files: %v: %s", err, out)
	}
	close(resume)
	<-doneA
	if b == nil {
		b = <-doneB
	}
	if b.Code != http.StatusOK {
		t.Fatalf("the other incarnation's chunk: %d %s", b.Code, b.Body)
	}

	c2, led2 := open(crashed)
	if err := Recover(ctx, c2, led2); err != nil {
		t.Fatal(err)
	}
	h2, err := NewHandler(c2, led2, o)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h2.ServeHTTP(w, chunkOf("inc-a"))
	var got struct{ Accepted, Duplicates int }
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("re-sent chunk: %d %s", w.Code, w.Body)
	}
	if got.Accepted != 0 || got.Duplicates != 10 {
		t.Fatalf("the chunk the crash left unanswered, sent again: %d accepted, %d duplicates; want 0 and 10 (its rows would be stored twice)", got.Accepted, got.Duplicates)
	}
}
