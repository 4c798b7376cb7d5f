//go:build !unix

package dwarfsym

import "errors"

func anonMap(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func anonUnmap([]byte) {}
