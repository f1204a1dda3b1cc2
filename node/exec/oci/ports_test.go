package oci

import (
	"slices"
	"testing"

	"github.com/vk-ci/vk/proto/job"
)

func TestServicePorts(t *testing.T) {
	for _, c := range []struct {
		name     string
		declared []job.Port
		exposed  []string
		want     []int
	}{
		{"declared win over exposed", []job.Port{{Number: 8080}}, []string{"5432/tcp"}, []int{8080}},
		{"exposed tcp, bare or named", nil, []string{"5432/tcp", "6379", "53/udp"}, []int{5432, 6379}},
		{"out of range left out", []job.Port{{Number: 0}, {Number: 70000}}, []string{"0/tcp", "65536", "x/tcp", "22/tcp"}, []int{22}},
		{"none", nil, nil, nil},
	} {
		if got := ServicePorts(c.declared, c.exposed); !slices.Equal(got, c.want) {
			t.Errorf("%s: ServicePorts = %v, want %v", c.name, got, c.want)
		}
	}
}
