// Package docs checks README.md against the code: its configuration
// examples load and validate through the components' factories, its
// configuration tables name every field with the real default, and its
// self-metrics table names every metric the receivers register.
package docs
