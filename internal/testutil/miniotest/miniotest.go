// Package miniotest owns running a real MinIO server for tests: finding the binary, starting
// it on free loopback ports with a throwaway data directory, stopping and restarting it, and
// a small S3 client for checking what landed. It never skips a test when MinIO is missing (a
// skipped S3 test hides exactly the failures it exists to catch) and is only for tests.
package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	accessKey = "hyptestadmin"
	secretKey = "hyptestadmin-secret"
	region    = "us-east-1"

	// startTimeout covers a cold first start on a busy 2-core machine (about 4 s when idle).
	startTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
	callTimeout  = 30 * time.Second
)

// Server is one MinIO process. Its ports and data directory stay fixed across Restart, so a
// client configured before a restart keeps working after it.
type Server struct {
	bin         string
	dataDir     string
	apiAddr     string
	consoleAddr string
	client      *s3.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs a MinIO server for the rest of t and stops it in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{bin: binary(t), dataDir: t.TempDir()}
	t.Cleanup(s.Stop)
	// Another process may take a port between freeAddrs and MinIO's bind: then MinIO exits
	// saying so, and it is started again on new ports (a Restart keeps its ports).
	for attempt := 1; ; attempt++ {
		addrs := freeAddrs(t, 2)
		s.apiAddr, s.consoleAddr = addrs[0], addrs[1]
		err := s.launch()
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, errPortTaken) {
			t.Fatal(err)
		}
	}
	s.client = s3.New(s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(s.Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
	})
	return s
}

// errPortTaken is MinIO refusing to start because one of its ports is in use.
var errPortTaken = errors.New("a port was taken")

// binary finds MinIO the way `make test` provides it; a missing binary fails the test with
// the fix, because the S3 path must be exercised on every machine that runs the suite.
func binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HYP_MINIO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HYP_MINIO_BIN=%s: %v; run `make test` (it installs MinIO) or point HYP_MINIO_BIN at a minio binary", p, err)
		}
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "hyp-tools", "bin", "minio")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	t.Fatal("no MinIO binary: run `make test` (it installs MinIO into ~/.cache/hyp-tools/bin) or set HYP_MINIO_BIN")
	return ""
}

// freeAddrs reserves nothing: it asks the kernel for n free ports, all held open together so
// that they differ (one released before the next is asked for can come back: MinIO then
// finds its API and console on one port), and releases them. That is racy only against other
// processes picking the same ports in the next instant, which Start survives.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
}

// launch starts MinIO on the server's ports and waits until it is live.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("miniotest: start while MinIO is running")
	}
	out := &syncBuffer{}
	cmd := exec.Command(s.bin, "server", "--address", s.apiAddr, "--console-address", s.consoleAddr, s.dataDir)
	cmd.Env = append(environWithout("MINIO_"),
		"MINIO_ROOT_USER="+accessKey,
		"MINIO_ROOT_PASSWORD="+secretKey,
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is reported through the output on failure
		close(done)
	}()
	s.cmd, s.done = cmd, done

	if err := waitLive(s.Endpoint(), done); err != nil {
		s.stopLocked()
		if strings.Contains(out.String(), "already in use") {
			err = fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return fmt.Errorf("MinIO at %s did not start: %w\n--- minio output ---\n%s", s.apiAddr, err, out.String())
	}
	return nil
}

// environWithout drops variables a developer's shell may carry that would change how the
// test server behaves (credentials, region, storage class, ...).
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// waitLive waits for the cluster health check, which answers 200 only once the object layer
// is up: the liveness check answers earlier, and requests then fail with
// XMinioServerNotInitialized on a loaded machine.
func waitLive(endpoint string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/minio/health/cluster", nil)
		if err != nil {
			return fmt.Errorf("health request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("health check: HTTP %d", resp.StatusCode)
		}
		last = err
		select {
		case <-exited:
			return errors.New("process exited")
		case <-ctx.Done():
			return fmt.Errorf("not live after %v: %w", startTimeout, last)
		case <-tick.C:
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after a grace period) and waits for it. It is
// safe to call when the server is already stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	// Errors here mean the process is already gone, which is the goal.
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Restart stops the server if it runs and starts it again on the same ports and data, as an
// operator restarting a failed S3 endpoint would.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Endpoint is the S3 API base URL.
func (s *Server) Endpoint() string { return "http://" + s.apiAddr }

// AccessKey is the root user, usable as AWS_ACCESS_KEY_ID.
func (s *Server) AccessKey() string { return accessKey }

// SecretKey is the root password, usable as AWS_SECRET_ACCESS_KEY.
func (s *Server) SecretKey() string { return secretKey }

// Region is the region MinIO signs for.
func (s *Server) Region() string { return region }

// Env is the AWS environment a subprocess (a daemon under test) needs to reach this server
// through the standard credential chain. An empty AWS_SESSION_TOKEN overrides any token in
// the developer's shell, which would otherwise be sent with these keys and be rejected.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + accessKey,
		"AWS_SECRET_ACCESS_KEY=" + secretKey,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + region,
	}
}

// SetEnv sets Env in this test's process environment (restored when t ends).
func (s *Server) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Client is an S3 client for this server, for checks the helpers below do not cover.
func (s *Server) Client() *s3.Client { return s.client }

// CreateBucket creates bucket or fails t.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// List returns every key in bucket under prefix, in S3's (lexical) order.
func (s *Server) List(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatalf("list s3://%s/%s: %v", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// Get returns the object's bytes or fails t.
func (s *Server) Get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return data
}

// syncBuffer collects MinIO's output for failure messages; the process writes it from its
// own goroutines while a test may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
