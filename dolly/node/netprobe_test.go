package node

import "testing"

// A probe ordered to follow another starts when that one has ended here,
// whether the order came before the end or after it.
func TestProbesReceived(t *testing.T) {
	var p probesReceived
	waiting := p.done(1)
	select {
	case <-waiting:
		t.Fatal("probe 1 ended before anything was received")
	default:
	}
	p.end(1)
	select {
	case <-waiting:
	default:
		t.Fatal("an order that came first did not see probe 1 end")
	}
	p.end(1) // a second end is harmless
	p.end(2)
	select {
	case <-p.done(2):
	default:
		t.Fatal("an order that came after probe 2 ended waits for it")
	}
	select {
	case <-p.done(3):
		t.Fatal("probe 3 counts as ended, but never came")
	default:
	}
}
