// Package enum reads the protocol's string enums leniently: a value the
// reader does not know becomes the enum's Other value instead of an error
// (STYLE C5, API-55, NSESS-22).
package enum

// Parse returns s as a T if it is one of known or empty (absence), else
// other.
func Parse[T ~string](s string, other T, known []T) T {
	if s == "" {
		return T("")
	}
	for _, k := range known {
		if string(k) == s {
			return k
		}
	}
	return other
}

// Known reports whether v is one of known.
func Known[T ~string](v T, known []T) bool {
	for _, k := range known {
		if k == v {
			return true
		}
	}
	return false
}
