package imageuser

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestResolve(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n# a comment\napp:x:1000:1000::/home/app:/bin/sh\nbroken:x:zz:1::/:/bin/sh\n"
	group := "root:x:0:\napp:x:1000:\ndocker:x:998:app,other\nstaff:x:50:\n"
	for name, body := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		spec    string
		want    User
		wantErr bool
	}{
		{spec: "", want: User{Home: "/root"}},
		{spec: "root", want: User{Home: "/root"}},
		{spec: "app", want: User{UID: 1000, GID: 1000, Groups: []uint32{998}, Home: "/home/app"}},
		{spec: "1000", want: User{UID: 1000, GID: 1000, Groups: []uint32{998}, Home: "/home/app"}},
		{spec: "app:staff", want: User{UID: 1000, GID: 50, Home: "/home/app"}},
		{spec: "4242:7", want: User{UID: 4242, GID: 7, Home: "/"}},
		{spec: "4242", want: User{UID: 4242, Home: "/"}},
		{spec: "nobody", wantErr: true},
		{spec: "app:nogroup", wantErr: true},
		{spec: "broken", wantErr: true},
	}
	for _, tt := range tests {
		got, err := Resolve(root, tt.spec)
		if (err != nil) != tt.wantErr {
			t.Errorf("Resolve(%q) error = %v, want error %v", tt.spec, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got.UID != tt.want.UID || got.GID != tt.want.GID || got.Home != tt.want.Home || !slices.Equal(got.Groups, tt.want.Groups) {
			t.Errorf("Resolve(%q) = %+v, want %+v", tt.spec, got, tt.want)
		}
	}
}

func TestResolveDoesNotFollowLinksOutOfTheImage(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(root, "root"); err == nil {
		t.Fatal(`Resolve("root") through an etc link to the host's /etc found the host's root`)
	}
}
