package control

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/node"
	"github.com/hyp-project/hyp/internal/sink"
)

// serve runs a node of a fresh home behind its control socket and returns a client.
func serve(t *testing.T) (*node.Node, *Client, string) {
	t.Helper()
	ctx := context.Background()
	home := t.TempDir()
	cfg, err := config.Parse(home, []byte("sinks:\n  files: {type: blob, format: jsonl, destination: {type: local-fs, path: "+filepath.Join(home, "exports")+"}, schedule: \"@every 1h\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(ctx, home, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	sock := filepath.Join(home, "hyp.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(n, http.NotFoundHandler(), nil)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	return n, c, sock
}

func TestSocketIsOwnerOnlyAndSingle(t *testing.T) {
	_, _, sock := serve(t)
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want a socket with 0600", st.Mode())
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second daemon on a live socket: %v", err)
	}
	if _, err := Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock")); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("dial without a daemon: %v", err)
	}
}

// Errors cross the socket with their kind and the daemon's message, unchanged.
func TestSinkVerbsOverTheSocket(t *testing.T) {
	ctx := context.Background()
	n, c, _ := serve(t)
	if _, err := n.Ingest("logs", "web", []byte("{\"a\":1}\n{\"a\":2}\n")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.RunSinks(ctx, "files"); err != nil || len(res) != 1 || res[0].Rows != 2 {
		t.Fatalf("run: %+v %v", res, err)
	}
	st, err := c.SinkStatus(ctx, "")
	if err != nil || len(st) != 1 || len(st[0].Partitions) != 1 || st[0].Partitions[0].WatermarkSeq != 2 {
		t.Fatalf("status: %+v %v", st, err)
	}
	zero := int64(0)
	res, err := c.Rewind(ctx, sink.RewindRequest{Instance: "files", Target: sink.Target{Seq: &zero}, By: "test"})
	if err != nil || len(res.Changes) != 1 || res.Changes[0].RowsToExport != 2 {
		t.Fatalf("rewind: %+v %v", res, err)
	}
	for _, tc := range []struct {
		req  sink.RewindRequest
		want error
	}{
		{sink.RewindRequest{Instance: "nope", Target: sink.Target{Latest: true}}, sink.ErrUnknownSink},
		{sink.RewindRequest{Instance: "files"}, sink.ErrBadRewind},
	} {
		_, err := c.Rewind(ctx, tc.req)
		_, lerr := n.Rewind(ctx, tc.req)
		if !errors.Is(err, tc.want) || lerr == nil || err.Error() != lerr.Error() {
			t.Errorf("over the socket %v; in process %v; want kind %v and the same message", err, lerr, tc.want)
		}
	}
	// A refusal carries the plan: force a prune of everything past the sink.
	next := *n.Cfg
	next.Cache.Retention.Default = config.Duration(time.Nanosecond)
	if applied, restart := n.Reload(&next); len(applied) != 1 || len(restart) != 0 {
		t.Fatalf("reload of retention: applied %v, needs restart %v", applied, restart)
	}
	if _, err := c.RunSinks(ctx, "files"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prune(ctx, false); err != nil {
		t.Fatal(err)
	}
	res, err = c.Rewind(ctx, sink.RewindRequest{Instance: "files", Target: sink.Target{Seq: &zero}})
	if !errors.Is(err, sink.ErrRewindGap) || len(res.Changes) != 1 || res.Changes[0].Missing == nil {
		t.Fatalf("refused rewind: %+v %v", res, err)
	}
}

// The listing a reader gets over the socket is the daemon's own, its unflushed rows in
// files stored where the reader asked, and a daemon older than the client is told apart
// from a failing one, so the reader can load the tables itself.
func TestListingOverTheSocket(t *testing.T) {
	ctx := context.Background()
	n, c, _ := serve(t)
	if _, err := n.Ingest("logs", "web", []byte("{\"a\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Ingest("logs", "db", []byte("{\"a\":2}\n")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got, err := c.Listing(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	want, err := Local{n}.Listing(ctx, local)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Partitions) != 1 || len(got[0].Partitions[0].Files) != 1 || len(got[0].Unflushed) != 1 {
		t.Fatalf("over the socket %+v, want logs source=web's one file and one unflushed file", got)
	}
	sent, err := os.ReadFile(got[0].Unflushed[0].Path)
	if err != nil || filepath.Dir(got[0].Unflushed[0].Path) != dir {
		t.Fatalf("unflushed file %s: %v, want it in %s", got[0].Unflushed[0].Path, err, dir)
	}
	kept, err := os.ReadFile(want[0].Unflushed[0].Path)
	if err != nil || !bytes.Equal(sent, kept) {
		t.Fatalf("the unflushed file sent differs from the one a local node writes (%v)", err)
	}
	want[0].Unflushed[0].Path = got[0].Unflushed[0].Path
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("over the socket %+v, in process %+v", got, want)
	}

	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	old := http.NewServeMux() // a daemon from before the listing: ping and nothing more
	old.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]any{}) })
	srv := &http.Server{Handler: old}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	oc, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Listing(ctx, t.TempDir()); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("listing from an older daemon: %v, want ErrUnsupported", err)
	}
}
