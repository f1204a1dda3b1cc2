// Package vk is the root of the vk module: GitLab CI on a company's own
// fleet, with one fleet-wide arbiter deciding who gets capacity before any
// runner asks GitLab for a job.
//
// The programs are cmd/vk-hub (the hub), cmd/vk-gitlab (the relay),
// cmd/vk (the node agent, `vk node`, and the demo) and cmd/vk-sim (the
// simulator). This package holds only repository-wide tests.
package vk
