package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/sampleimage"
)

func cpu() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func main() {
	p := "/tmp/d/large.img"
	if _, err := os.Stat(p); err != nil {
		if err := sampleimage.Build(context.Background(), p, sampleimage.Spec{Size: 1024 << 20, Files: 360 << 20}); err != nil {
			panic(err)
		}
	}
	for i := 0; i < 3; i++ {
		im, err := imaging.OpenImage(p)
		if err != nil {
			panic(err)
		}
		t, c0 := time.Now(), cpu()
		enc, err := stream.NewEncoder(im, stream.CastID{1}, 1<<20, imaging.Zstd)
		if err != nil {
			panic(err)
		}
		var wire int64
		for {
			c, err := enc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				panic(err)
			}
			wire += int64(len(c.Header) + len(c.Payload))
		}
		el := time.Since(t)
		fmt.Printf("source zstd on the fly: %.0f MB/s raw wall, %.2f cores, wire %.0f MB\n", float64(im.Size)/el.Seconds()/1e6, (cpu()-c0).Seconds()/el.Seconds(), float64(wire)/1e6)
		enc.Close()
		im.Close()
	}
}
