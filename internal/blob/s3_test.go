package blob

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/hyp-project/hyp/internal/testutil/miniotest"
)

func newTestS3(t *testing.T, srv *miniotest.Server, prefix string) *S3 {
	t.Helper()
	srv.SetEnv(t)
	d, err := NewS3(context.Background(), S3Config{
		Bucket: "exports", Prefix: prefix, Endpoint: srv.Endpoint(), ForcePathStyle: true,
	}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestS3Put(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "exports")
	d := newTestS3(t, srv, "/team/hyp/")
	if d.String() != "s3://exports/team/hyp" {
		t.Errorf("String() = %s", d.String())
	}
	ctx := context.Background()
	obj := Object{Key: Key("logs", "source=web", 1, 10, JSONL, LayoutPlain), UnitID: "aa01", Rows: 10, FirstSeq: 1, LastSeq: 10}
	full := "team/hyp/logs/source=web/part-00000000000000000001-00000000000000000010.jsonl.gz"

	tmp := writeTemp(t, d, "unit one")
	if err := d.Put(ctx, obj, tmp); err != nil {
		t.Fatal(err)
	}
	if got := srv.List(t, "exports", ""); len(got) != 1 || got[0] != full {
		t.Fatalf("bucket holds %v, want [%s]", got, full)
	}
	if got := string(srv.Get(t, "exports", full)); got != "unit one" {
		t.Fatalf("object holds %q", got)
	}
	head, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("exports"), Key: aws.String(full)})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"hyp-unit": "aa01", "hyp-rows": "10", "hyp-first-seq": "1", "hyp-last-seq": "10"} {
		if head.Metadata[k] != want {
			t.Errorf("metadata %s = %q, want %q (all: %v)", k, head.Metadata[k], want, head.Metadata)
		}
	}

	// The same unit again (a retry after a lost response): nil, object unchanged.
	if err := d.Put(ctx, obj, writeTemp(t, d, "unit one, retried")); err != nil {
		t.Fatalf("re-put of the same unit: %v", err)
	}
	if got := string(srv.Get(t, "exports", full)); got != "unit one" {
		t.Fatalf("re-put replaced the object: %q", got)
	}

	// Another unit at the same key: a conflict, never an overwrite.
	other := obj
	other.UnitID = "bb02"
	err = d.Put(ctx, other, writeTemp(t, d, "intruder"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("put of another unit: %v, want ErrConflict", err)
	}
	if !strings.Contains(err.Error(), full) {
		t.Errorf("conflict error does not name the key: %v", err)
	}
	if got := string(srv.Get(t, "exports", full)); got != "unit one" {
		t.Fatalf("conflicting put replaced the object: %q", got)
	}
}

// TestS3ConcurrentPuts races writers of one unit: every one of them must see success and
// exactly one object must exist, whichever of S3's answers (412, 409) each gets.
func TestS3ConcurrentPuts(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "exports")
	d := newTestS3(t, srv, "")
	obj := Object{Key: Key("logs", "source=web", 1, 1, Parquet, LayoutPlain), UnitID: "cc03", Rows: 1, FirstSeq: 1, LastSeq: 1}
	const writers = 8
	paths := make([]string, writers)
	for i := range paths {
		paths[i] = writeTemp(t, d, strings.Repeat("x", 1<<20))
	}
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() { errs[i] = d.Put(context.Background(), obj, paths[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if got := srv.List(t, "exports", ""); len(got) != 1 || got[0] != obj.Key {
		t.Fatalf("bucket holds %v", got)
	}
}

func TestS3Outage(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "exports")
	d := newTestS3(t, srv, "p")
	obj := Object{Key: Key("logs", "source=web", 1, 5, Parquet, LayoutPlain), UnitID: "dd04", Rows: 5, FirstSeq: 1, LastSeq: 5}
	tmp := writeTemp(t, d, "rows")

	srv.Stop()
	start := time.Now()
	err := d.Put(context.Background(), obj, tmp)
	took := time.Since(start)
	// The SDK's own retries of a refused connection must end on their own, well before the
	// caller's next tick, and must not look like a conflict.
	if err == nil || errors.Is(err, ErrConflict) || took > 30*time.Second {
		t.Fatalf("Put with MinIO stopped: %v after %v", err, took)
	}
	t.Logf("stopped MinIO: failed after %v: %v", took, err)

	srv.Restart(t)
	if err := d.Put(context.Background(), obj, tmp); err != nil {
		t.Fatalf("Put after restart: %v", err)
	}
	if got := srv.List(t, "exports", "p/"); len(got) != 1 || got[0] != "p/"+obj.Key {
		t.Fatalf("bucket holds %v", got)
	}
}

// TestS3HungEndpoint points at a server that accepts connections and never answers: only
// the caller's deadline can end the Put, and it must.
func TestS3HungEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	d, err := NewS3(context.Background(), S3Config{Bucket: "exports", Endpoint: "http://" + l.Addr().String(), ForcePathStyle: true}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = d.Put(ctx, Object{Key: "k", UnitID: "u"}, writeTemp(t, d, "rows"))
	if took := time.Since(start); err == nil || took > 3*time.Second {
		t.Fatalf("Put against a hung endpoint: %v after %v", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want the deadline in the error chain, got %v", err)
	}
}

func TestNewS3Rejects(t *testing.T) {
	cases := []struct {
		name string
		cfg  S3Config
		want string
	}{
		{"no bucket", S3Config{Endpoint: "http://127.0.0.1:9000"}, "bucket"},
		{"endpoint without scheme", S3Config{Bucket: "b", Endpoint: "127.0.0.1:9000"}, "endpoint"},
		{"endpoint of another scheme", S3Config{Bucket: "b", Endpoint: "ftp://host"}, "endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewS3(context.Background(), c.cfg, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error about the %s, got %v", c.want, err)
			}
		})
	}
}
