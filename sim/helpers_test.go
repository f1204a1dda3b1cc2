package sim

import (
	"errors"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
