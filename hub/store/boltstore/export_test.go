package boltstore

// SetSolo makes every write of s its own transaction (no group commit), so
// benchmarks can compare the two.
func SetSolo(s *Store, solo bool) { s.solo = solo }
