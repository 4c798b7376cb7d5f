// Package buildid holds the one rule for which GNU build-ids bpfcol lets
// into a path or a URL.
package buildid

// Length bounds, in hex characters. The lower bound is what the
// .build-id/NN/REST.debug layout needs (a two-character directory and a
// non-empty rest); the upper bound is the longest note any linker writes
// (SHA-512 would be 128).
const (
	MinLen = 4
	MaxLen = 128
)

// Valid reports whether id is a build-id bpfcol accepts: lowercase hex, an
// even number of characters, from MinLen to MaxLen. Anything else (upper
// case, separators, "..") never reaches a file name or a request.
func Valid(id string) bool {
	if len(id) < MinLen || len(id) > MaxLen || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
