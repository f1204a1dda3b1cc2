package store

import "testing"

func TestInstanceKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://gitlab.example.com", "gitlab.example.com"},
		{"https://GitLab.Example.com/", "gitlab.example.com"},
		{"http://127.0.0.1:40333", "127.0.0.1:40333"},
		{"http://[::1]:8080/path", "[::1]:8080"},
		{"gitlab.example.com", "gitlab.example.com"},
		{"127.0.0.1:40333", "127.0.0.1:40333"},
		{"GitLab.example.com", "gitlab.example.com"},
		{"", ""},
		{"http://", ""},
		{"http:%2F%2F127.0.0.1:40333 1", ""},
		{"a/b", ""},
	} {
		if got := InstanceKey(tc.in); got != tc.want {
			t.Errorf("InstanceKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, s := range []string{"http:", "x y", "user@host", "host/path", "Host"} {
		if ValidInstance(s) {
			t.Errorf("ValidInstance(%q) = true", s)
		}
	}
}
