// Package e2e holds end-to-end tests that run the bpfcol binary built by
// `make build` (bin/bpfcol) as a user would.
package e2e
