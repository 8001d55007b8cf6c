package sink

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	homepkg "github.com/hyp-project/hyp/internal/home"
)

// A sink that cannot be built still holds its rows from retention and fails every run
// with why; Err names it so the daemon can refuse to start.
func TestBrokenSinkFailsRunsAndStillHoldsRows(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c, err := cache.Open(ctx, filepath.Join(home, "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Ingest("logs", "web", []byte(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(home, "no-such-token")
	d, err := New(ctx, Options{Home: home, Cache: c, Sinks: map[string]config.Sink{
		"central": {Type: "forward", URL: config.URLs{"http://127.0.0.1:1"}, TokenFile: missing, Schedule: "@every 1h"},
		"files":   {Type: "blob", Format: "jsonl", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(home, "exports")}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), "central") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Err() = %v", err)
	}
	res, err := d.RunNow(ctx, "")
	if err != nil || len(res) != 2 {
		t.Fatalf("RunNow = %+v, %v", res, err)
	}
	if res[0].Instance != "central" || res[0].Status != "failed" || len(res[0].Errors) != 1 || !strings.Contains(res[0].Errors[0], "token_file") {
		t.Fatalf("broken sink run %+v", res[0])
	}
	if res[1].Status != "ok" || res[1].Rows != 1 {
		t.Fatalf("healthy sink run %+v", res[1])
	}
	// The healthy sink is past the row, the broken one is not: the row stays held for it.
	if f := cache.LowestOf(d.Consumers("logs", "source=web")); f.Seq != 0 || len(f.Holders) != 1 || f.Holders[0] != "central" {
		t.Fatalf("Floor = %+v", f)
	}
}

// A copy of a home whose config still names the original's gateway_id must not send as it:
// the forward sink fails every run naming the conflict, while the daemon may start (Err is
// nil) and the other sinks work. A copy without a configured id takes a new one instead.
func TestGatewayIdentityOfACopiedHome(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		configured string
		conflict   bool
	}{
		{"configured id kept by the copy", "web-1", true},
		{"generated id", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			token := filepath.Join(home, "token")
			if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// The binding the original wrote at another path.
			orig, err := homepkg.Gateway(home, tc.configured, homepkg.Place{Home: "/elsewhere", Machine: "m0"})
			if err != nil {
				t.Fatal(err)
			}
			c, err := cache.Open(ctx, filepath.Join(home, "cache"), cache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			if _, err := c.Ingest("logs", "web", []byte(`{"id":1}`)); err != nil {
				t.Fatal(err)
			}
			d, err := New(ctx, Options{Home: home, GatewayID: tc.configured, Cache: c, Sinks: map[string]config.Sink{
				"central": {Type: "forward", URL: config.URLs{"http://127.0.0.1:1"}, TokenFile: token, Schedule: "@every 1h"},
				"files":   {Type: "blob", Format: "jsonl", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(home, "exports")}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			x := d.inst(t, "central")
			if !tc.conflict {
				if x.broken != nil || x.gateway == orig.ID {
					t.Fatalf("copy sends as %q (original %q), broken %v", x.gateway, orig.ID, x.broken)
				}
				return
			}
			res, err := d.RunNow(ctx, "")
			if err != nil || len(res) != 2 {
				t.Fatalf("RunNow = %+v, %v", res, err)
			}
			if res[0].Status != "failed" || len(res[0].Errors) != 1 || !strings.Contains(res[0].Errors[0], "gateway identity conflict") || !strings.Contains(res[0].Errors[0], "web-1") {
				t.Fatalf("conflicting forward sink run %+v", res[0])
			}
			if res[1].Status != "ok" || res[1].Rows != 1 {
				t.Fatalf("blob sink run %+v", res[1])
			}
		})
	}
}
