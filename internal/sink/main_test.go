package sink

import (
	"os"
	"testing"

	"github.com/hyp-project/hyp/internal/lake"
)

// TestMain installs the lake's durable IO before any test opens a cache, as the process
// does (lake.InstallDurableIO): these tests open caches and then Lakes in one binary.
func TestMain(m *testing.M) {
	lake.InstallDurableIO()
	os.Exit(m.Run())
}
