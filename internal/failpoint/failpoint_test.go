package failpoint

import (
	"os"
	"strings"
	"testing"
)

// TestAtFollowsTheBuild: a binary built without the failpoints tag has no step whatever
// HYP_FAILPOINT says; one built with it has exactly the step the variable named at start.
// Run it both ways: `HYP_FAILPOINT=after-ship:2 go test [-tags ...,failpoints]`.
func TestAtFollowsTheBuild(t *testing.T) {
	named, _, _ := strings.Cut(os.Getenv(Env), ":")
	for _, s := range []string{"", "after-intent", "after-ship", "server-after-append", "cluster-after-stage"} {
		want := Armed && s != "" && s == named
		if got := At(s) != nil; got != want {
			t.Errorf("At(%q) set = %v with %s=%q in a binary armed %v", s, got, Env, os.Getenv(Env), Armed)
		}
	}
}
