//go:build !linux

package process

import "os"

// DupFile needs linux, as held files do.
func DupFile(*os.File) (*os.File, error) { return nil, errNeedsLinux }
