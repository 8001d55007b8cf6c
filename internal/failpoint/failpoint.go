// Package failpoint owns hyp's crash-test switch, the HYP_FAILPOINT environment variable
// `<step>:<n>`: the n-th time the process reaches step it kills itself with SIGKILL, so tests
// can prove exactly-once at every step against the real binary. The steps are named by the
// packages that place them (sink, server, cluster; the README lists them); this package never
// decides where a process may die.
//
// The switch exists only in a binary built with the `failpoints` build tag (armed.go), which
// `make test` builds beside the shipped one for the crash tests. The shipped binary has none
// (disarmed.go): At is a constant nil there, so no environment variable can make a production
// process kill itself, and a step costs nothing.
//
// At is the one way in. In an armed binary the switch and its count are the process's, as the
// environment variable is: every place that reaches a step counts towards the same n.
package failpoint

// Env names the switch.
const Env = "HYP_FAILPOINT"
