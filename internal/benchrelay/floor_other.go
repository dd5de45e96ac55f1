//go:build !linux

package main

import "errors"

func floorRelay(listen, next, target string) error {
	return errors.New("the splice-only relay needs Linux")
}
