//go:build !failpoints

package failpoint

// Armed says whether this binary has the switch.
const Armed = false

// At is nil for every step: a binary built without the failpoints tag never kills itself.
func At(string) func() { return nil }
