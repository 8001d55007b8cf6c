package forward

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestReplicaPasswordNeverShown: a password in a replica's URL is sent but appears in no
// retry log line, error or state, and a URL whose password cannot be located is refused by
// New without quoting it.
func TestReplicaPasswordNeverShown(t *testing.T) {
	clock := newFakeClock()
	var urls []string
	for _, pass := range []string{"S3CRET", "S3%2FCRET"} {
		u, _ := down()(t, clock, nil)
		urls = append(urls, strings.Replace(u, "http://", "http://hyp:"+pass+"@", 1))
	}
	var logs bytes.Buffer
	c := newTestClient(t, urls[0], clock, &logs, func(o *Options) { o.URLs = urls })
	_, err := c.Send(context.Background(), testChunk())
	if kind(err) != "retryable" {
		t.Fatalf("Send: %v, want retryable", err)
	}
	if !strings.Contains(logs.String(), "forward: retrying") {
		t.Fatalf("no retry logged:\n%s", logs.String())
	}
	st := c.State()
	shown := map[string]string{"log": logs.String(), "error": err.Error(), "state": fmt.Sprintf("%+v", st)}
	for what, text := range shown {
		if strings.Contains(text, "S3") {
			t.Errorf("%s shows a password:\n%s", what, text)
		}
	}
	if !strings.Contains(st.Replicas[0].URL, "hyp:xxxxx@") {
		t.Errorf("replica %q does not say it has a password", st.Replicas[0].URL)
	}

	for _, bad := range []string{"http://hyp:S3/CRET@central:1", "http://hyp:S3%ZZCRET@central:1", "http://hyp:S3#CRET@central:1"} {
		_, err := New(Options{URLs: []string{bad}, Token: "t", Gateway: "g", Logger: slog.New(slog.DiscardHandler)})
		if err == nil || strings.Contains(err.Error(), "S3") || strings.Contains(err.Error(), "CRET") {
			t.Errorf("New(%q): %v, want an error without the password", bad, err)
		}
	}
}
