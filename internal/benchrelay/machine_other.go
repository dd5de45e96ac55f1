//go:build !linux

package main

import (
	"errors"
	"time"
)

var errLinux = errors.New("bench-relay needs Linux")

func processCPU(int) (time.Duration, error)             { return 0, errLinux }
func blockTarget(string, int64) (string, func(), error) { return "", nil, errLinux }
func poison(string, int64) error                        { return errLinux }
func syncDevice(string) error                           { return errLinux }
