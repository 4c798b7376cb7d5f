//go:build !linux

package process

import "os"

// dupFile needs linux, as held files do.
func dupFile(*os.File) (*os.File, error) { return nil, errNeedsLinux }
