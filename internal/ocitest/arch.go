package ocitest

import "runtime"

func hostArch() string { return runtime.GOARCH }
