package imaging

// CRC-32C arithmetic that lets a CRC already computed be reused instead of
// reading the bytes again. A CRC register is a polynomial over GF(2) in
// reflected bit order (bit 31 is x^0); the CRC of a concatenation a‖b is
// the CRC of a multiplied by x^(8·len(b)) modulo the polynomial, plus the
// CRC of b (the pre- and post-inversion of the standard CRC cancel out).

// castagnoliReflected is the CRC-32C polynomial in reflected bit order.
const castagnoliReflected = 0x82f63b78

// gfMul multiplies two polynomials modulo the CRC-32C polynomial.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow2 holds x^(2^k) modulo the polynomial, for k = 0..63.
var xPow2 = func() (t [64]uint32) {
	t[0] = 1 << 30 // x^1
	for k := 1; k < len(t); k++ {
		t[k] = gfMul(t[k-1], t[k-1])
	}
	return t
}()

// crcShift multiplies crc by x^(8n): the CRC of a‖b is
// crcShift(crc(a), len(b)) ^ crc(b).
func crcShift(crc uint32, n int64) uint32 {
	bits := uint64(n) * 8
	for k := 0; bits != 0; k, bits = k+1, bits>>1 {
		if bits&1 != 0 {
			crc = gfMul(xPow2[k], crc)
		}
	}
	return crc
}

// CRC32CCombine returns the CRC-32C of a‖b from the CRC of a, the CRC of b
// and the length of b.
func CRC32CCombine(crcA, crcB uint32, lenB int64) uint32 {
	return crcShift(crcA, lenB) ^ crcB
}
