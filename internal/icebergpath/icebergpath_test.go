package icebergpath

import (
	"strings"
	"testing"
)

// TestCheckHadoopWarehouse: a path a URL keeps as it is passes; any other is refused naming each
// character that would be escaped, once, and where iceberg-go would put the data files.
func TestCheckHadoopWarehouse(t *testing.T) {
	for _, ok := range []string{"/data/lake", "/tmp/a-b_c.d~e/f"} {
		if err := CheckHadoopWarehouse(ok); err != nil {
			t.Errorf("CheckHadoopWarehouse(%q) = %v", ok, err)
		}
	}
	for path, want := range map[string]string{
		"/tmp/100%/lake":   `a path with "%" in it`,
		"/data/my lake":    `a path with " " in it (iceberg-go would write its data files under "/data/my%20lake")`,
		"/a b/c d/é?#x":    `a path with " ", "é", "?", "#" in it`,
		"/data/lake?query": `a path with "?" in it`,
	} {
		err := CheckHadoopWarehouse(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHadoopWarehouse(%q) = %v, want it to say %s", path, err, want)
		}
	}
}
