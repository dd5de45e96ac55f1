package capacity

import (
	"encoding/json"
	"fmt"

	"dolly/internal/units"
)

// MB is the unit people read rates in: 10^6 bytes (per second).
const MB = 1e6

// rate is a JSON rate in bytes per second: a number, or a string with a
// unit ("1Gbit", "12.5MB/s").
type rate float64

func (r *rate) UnmarshalJSON(data []byte) error {
	v, err := decodeQuantity(data, units.ParseRate)
	*r = rate(v)
	return err
}

// size is a JSON size in bytes: a number, or a string with a unit ("2GB").
type size int64

func (z *size) UnmarshalJSON(data []byte) error {
	v, err := decodeQuantity(data, func(s string) (float64, error) {
		n, err := units.ParseSize(s)
		return float64(n), err
	})
	*z = size(v)
	return err
}

func decodeQuantity(data []byte, parse func(string) (float64, error)) (float64, error) {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		return parse(s)
	}
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, fmt.Errorf("%s: want a number or a string with a unit", data)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s: must be ≥ 0", data)
	}
	return v, nil
}
