//go:build !unix

package symbolize

import "errors"

func anonMap(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func anonUnmap([]byte) {}
