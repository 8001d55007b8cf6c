package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestConnectErrorsShowNoPassword: a cluster URI whose password cannot be located, and one
// pgx cannot reach, fail Open and Status naming the database with its password masked.
func TestConnectErrorsShowNoPassword(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"postgres://hyp:S3/CRET@127.0.0.1:1/hyp", "cannot tell where its password ends"},
		{"postgres://hyp:S3%ZZCRET@127.0.0.1:1/hyp", "cannot tell where its password ends"},
		{"postgres://hyp:S3CRET@127.0.0.1:1/hyp?connect_timeout=5", "postgres://hyp:xxxxx@127.0.0.1:1/hyp"},
		{"postgres://hyp@127.0.0.1:1/hyp?connect_timeout=5&sslpassword=S3CRET", "sslpassword=xxxxx"},
	} {
		_, err := Open(context.Background(), Options{Postgres: tc.uri, CommitInterval: time.Hour, GroupBytes: 8 << 20})
		_, serr := Status(context.Background(), tc.uri)
		for what, err := range map[string]error{"Open": err, "Status": serr} {
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "S3") {
				t.Errorf("%s(%q): %v, want an error saying %q without the password", what, tc.uri, err, tc.want)
			}
		}
	}
}
