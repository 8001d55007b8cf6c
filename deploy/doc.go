// Package deploy holds what hyp ships to run as a service: systemd units, default configs,
// Prometheus alert rules with their promtool tests, and a Grafana dashboard. Its Go code is
// only tests, which hold those files to the code: every metric and label an expression names
// is one internal/ registers, every ExecStart flag is one the hyp binary takes, and
// `make install` lays the files out where the units expect them. It never holds runtime code.
package deploy
