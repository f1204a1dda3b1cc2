package translate

import "testing"

// BenchmarkTranslate translates the complete (Rails-shaped) job response,
// cache key expansion included.
func BenchmarkTranslate(b *testing.B) {
	r := fixture(b, "job_response_gitlab_complete.json")
	for b.Loop() {
		if _, err := Translate(r, testRunner); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSanitizeCacheKey sanitises a key needing every rule.
func BenchmarkSanitizeCacheKey(b *testing.B) {
	for b.Loop() {
		if _, err := SanitizeCacheKey(`..\foo%2Fbar/./baz/../qux \t`); err != nil {
			b.Fatal(err)
		}
	}
}
