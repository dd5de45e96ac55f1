package stream

import (
	"io"
	"sync"
)

// bufPipe is io.Pipe with room for a few writes: the writer goes on while
// the reader has not taken the last ones yet. The compressor that feeds a
// stream and the framer that reads it then each run when they can, rather
// than each waiting for the other at every block.
type bufPipe struct {
	blocks chan []byte
	done   chan struct{} // closed by the reader's CloseWithError
	once   sync.Once
	rerr   error // why the reader stopped (set before done is closed)
	werr   error // why the writer stopped (set before blocks is closed)
	cur    []byte
	block  []byte // the whole of the block cur is the rest of
	// spent, if set, takes each block given (give) once Read has copied
	// all of it out, for the writer to fill again.
	spent func([]byte)
}

func newBufPipe(slots int) *bufPipe {
	return &bufPipe{blocks: make(chan []byte, slots), done: make(chan struct{})}
}

// Write copies p into the pipe; it waits only while every slot is full.
// Once the reader has stopped, every write fails: a select would take a
// free slot as often as the reader's end.
func (p *bufPipe) Write(b []byte) (int, error) {
	select {
	case <-p.done:
		return 0, p.rerr
	default:
	}
	c := append([]byte(nil), b...)
	select {
	case p.blocks <- c:
		return len(b), nil
	case <-p.done:
		return 0, p.rerr
	}
}

// give passes b to the reader as Write does, without a copy: the caller
// must not touch b again.
func (p *bufPipe) give(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	select {
	case <-p.done:
		return p.rerr
	default:
	}
	select {
	case p.blocks <- b:
		return nil
	case <-p.done:
		return p.rerr
	}
}

// CloseWriter ends the stream with err (nil: io.EOF for the reader).
func (p *bufPipe) CloseWriter(err error) {
	if err == nil {
		err = io.EOF
	}
	p.werr = err
	close(p.blocks)
}

func (p *bufPipe) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.block != nil && p.spent != nil {
			p.spent(p.block)
		}
		p.block = nil
		c, ok := <-p.blocks
		if !ok {
			return 0, p.werr
		}
		p.cur, p.block = c, c
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// CloseReader stops the writer with err.
func (p *bufPipe) CloseReader(err error) {
	p.once.Do(func() {
		p.rerr = err
		close(p.done)
	})
}
