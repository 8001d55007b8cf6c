package miniotest

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "bkt")
	put := func(key, body string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := s.Client().PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("bkt"), Key: aws.String(key), Body: strings.NewReader(body),
		})
		return err
	}
	if err := put("x/one", "1"); err != nil {
		t.Fatal(err)
	}
	if err := put("x/two", "22"); err != nil {
		t.Fatal(err)
	}
	if got := s.List(t, "bkt", "x/"); !slices.Equal(got, []string{"x/one", "x/two"}) {
		t.Fatalf("List = %v", got)
	}

	s.Stop()
	if err := put("x/three", "3"); err == nil {
		t.Fatal("put succeeded against a stopped server")
	}
	s.Stop() // stopping twice is harmless

	s.Restart(t)
	if got := s.Get(t, "bkt", "x/two"); !bytes.Equal(got, []byte("22")) {
		t.Fatalf("after restart Get = %q, want the data written before", got)
	}
}

func TestEnv(t *testing.T) {
	s := &Server{apiAddr: "127.0.0.1:1"}
	env := s.Env()
	for _, want := range []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey(), "AWS_SECRET_ACCESS_KEY=" + s.SecretKey(), "AWS_REGION=us-east-1"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env() = %v lacks %s", env, want)
		}
	}
	if s.Endpoint() != "http://127.0.0.1:1" {
		t.Errorf("Endpoint() = %s", s.Endpoint())
	}
}

// fatalTB records a Fatal and ends the goroutine, as testing does, so a test can check
// what Start says when it cannot run MinIO.
type fatalTB struct {
	testing.TB
	msg     string
	skipped bool
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalTB) Skip(...any)          { f.skipped = true; runtime.Goexit() }
func (f *fatalTB) Skipf(string, ...any) { f.skipped = true; runtime.Goexit() }
func (f *fatalTB) SkipNow()             { f.skipped = true; runtime.Goexit() }

func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("HYP_MINIO_BIN", filepath.Join(t.TempDir(), "no-minio"))
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		binary(f)
	}()
	<-done
	if f.skipped || !strings.Contains(f.msg, "make test") || !strings.Contains(f.msg, "HYP_MINIO_BIN") {
		t.Fatalf("skipped=%v, message %q: want a failure telling how to install MinIO", f.skipped, f.msg)
	}
}
