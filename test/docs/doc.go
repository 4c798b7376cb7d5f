// Package docs checks the documents against the code: README.md's
// configuration examples load and validate through the components'
// factories, its configuration tables name every field with the real
// default (in words too) and only values Validate accepts in their
// Allowed column, its self-metrics table names every metric the receivers
// register and those a running bin/bpfcol emits, and
// docs/ARCHITECTURE.md names every package and only paths that exist.
package docs
