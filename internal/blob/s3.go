package blob

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/hyp-project/hyp/internal/redact"
)

// S3Config is an S3 destination as written in the config.
type S3Config struct {
	Bucket string
	// Prefix goes before every key; leading and trailing slashes are ignored.
	Prefix string
	// Region overrides the credential chain's region; with neither, us-east-1.
	Region string
	// Endpoint is a base URL for S3-compatible stores (MinIO, ...); empty means AWS.
	Endpoint       string
	ForcePathStyle bool
}

// Object metadata written with every export, so a later Put of the same key can tell a
// retry of its own unit from a different unit.
const (
	metaUnit     = "hyp-unit"
	metaRows     = "hyp-rows"
	metaFirstSeq = "hyp-first-seq"
	metaLastSeq  = "hyp-last-seq"
)

const (
	// putBaseTimeout bounds one PutObject call (the SDK's own retries included) beyond the
	// time the body needs at putMinRate, so a large unit on a slow link is not cut off while
	// a hung connection still is.
	putBaseTimeout = 30 * time.Second
	putMinRate     = 1 << 20 // bytes per second
	headTimeout    = 30 * time.Second
	// conflictAttempts bounds Put's own retries of a 409 (a concurrent conditional write
	// to the same key) and of an object that vanished between the 412 and the look at it.
	conflictAttempts = 4
	conflictBackoff  = 100 * time.Millisecond
)

// S3 is a Destination in an S3 bucket. Objects are created first-writer-wins
// (If-None-Match: *), so an object, once there, is never replaced.
type S3 struct {
	client  *s3.Client
	bucket  string
	prefix  string
	tempDir string
}

// NewS3 builds an S3 destination with credentials from the standard AWS chain (environment,
// shared profile, instance role). It does not contact S3: a bucket that is unreachable now
// may be reachable by the first export. tempDir is where export files are written before
// upload; empty means the system temp directory.
func NewS3(ctx context.Context, cfg S3Config, tempDir string) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 destination: bucket is empty")
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The endpoint may carry credentials an operator pasted into it.
			return nil, fmt.Errorf("s3 destination: endpoint %q is not an http(s)://host URL", redact.String(cfg.Endpoint))
		}
	}
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 destination s3://%s: load AWS config: %w", cfg.Bucket, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.ForcePathStyle
	})
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	return &S3{client: client, bucket: cfg.Bucket, prefix: strings.Trim(cfg.Prefix, "/"), tempDir: tempDir}, nil
}

func (s *S3) TempDir() string { return s.tempDir }

func (s *S3) String() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + s.prefix
}

func (s *S3) objectKey(key string) string {
	if s.prefix == "" {
		return key
	}
	return s.prefix + "/" + key
}

// Put uploads localPath to <prefix>/<obj.Key> unless the key already holds an object. If it
// holds this unit (a retry after a lost response, or after a crash), Put returns nil; if it
// holds another unit, an error wrapping ErrConflict. Put does not remove localPath.
func (s *S3) Put(ctx context.Context, obj Object, localPath string) error {
	key := s.objectKey(obj.Key)
	where := "s3://" + s.bucket + "/" + key
	for attempt := 1; ; attempt++ {
		err := s.putOnce(ctx, key, obj, localPath)
		if err == nil {
			return nil
		}
		switch httpStatus(err) {
		case http.StatusPreconditionFailed:
			unit, found, herr := s.unitAt(ctx, key)
			if herr != nil {
				return fmt.Errorf("put %s: exists, and reading its unit failed: %w", where, herr)
			}
			if found {
				if unit == obj.UnitID {
					return nil
				}
				return fmt.Errorf("put %s: %w (it holds unit %q, this is unit %q)", where, ErrConflict, unit, obj.UnitID)
			}
			// Deleted between the two calls: nothing is there now, so try again.
		case http.StatusConflict:
			// Another conditional write to the key is in flight; its outcome decides ours.
		default:
			return fmt.Errorf("put %s: %w", where, err)
		}
		if attempt == conflictAttempts {
			return fmt.Errorf("put %s: still contended after %d attempts: %w", where, attempt, err)
		}
		if err := sleep(ctx, conflictBackoff<<attempt); err != nil {
			return fmt.Errorf("put %s: %w", where, err)
		}
	}
}

func (s *S3) putOnce(ctx context.Context, key string, obj Object, localPath string) error {
	f, err := os.Open(localPath)
	if err != nil {
		return fmt.Errorf("open export file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat export file: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, putBaseTimeout+time.Duration(st.Size()/putMinRate)*time.Second)
	defer cancel()
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          f,
		ContentLength: aws.Int64(st.Size()),
		IfNoneMatch:   aws.String("*"),
		Metadata: map[string]string{
			metaUnit:     obj.UnitID,
			metaRows:     strconv.FormatInt(obj.Rows, 10),
			metaFirstSeq: strconv.FormatInt(obj.FirstSeq, 10),
			metaLastSeq:  strconv.FormatInt(obj.LastSeq, 10),
		},
	})
	return err
}

// unitAt reads the unit id recorded on the object at key. An object without one (not
// written by hyp) reports found with an empty id, which conflicts with every unit.
func (s *S3) unitAt(ctx context.Context, key string) (unit string, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if httpStatus(err) == http.StatusNotFound {
			return "", false, nil
		}
		return "", false, err
	}
	// Header names are case-insensitive and SDKs differ in how they fold metadata keys.
	for k, v := range out.Metadata {
		if strings.EqualFold(k, metaUnit) {
			return v, true, nil
		}
	}
	return "", true, nil
}

// httpStatus is the HTTP status of a failed SDK call, or 0 when no response came back.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// sleep waits d plus up to d of jitter, so writers contending for one key spread out.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d + rand.N(d))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
