package listening

import (
	"net"
	"os"
	"testing"
)

// TestOn: this process is seen on the address it listens on, and not on another, nor once
// it stopped listening.
func TestOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	otherAddr := other.Addr().String()
	other.Close()
	if !On(os.Getpid(), l.Addr().String()) {
		t.Errorf("not seen listening on %s", l.Addr())
	}
	if On(os.Getpid(), otherAddr) {
		t.Errorf("seen listening on %s, which it closed", otherAddr)
	}
	if On(1, l.Addr().String()) {
		t.Errorf("pid 1 seen listening on this test's %s", l.Addr())
	}
	l.Close()
	if On(os.Getpid(), l.Addr().String()) {
		t.Errorf("still seen on %s after closing it", l.Addr())
	}
}
