package vmproto

import "io"

// WriteTree writes the tar stream the agent's archive writes (directories,
// regular files and symbolic links of root/rel, named relative to rel),
// for the host side of an extract: the node sends a host tree into the
// guest with it.
func WriteTree(root, rel string, w io.Writer) error { return archive(root, rel, nil, w) }

// ReadTree unpacks a tar stream into root/rel as the agent's extract does:
// through an os.Root, refusing names and links that would leave it and
// entries other than directories, regular files and symbolic links. The
// node unpacks what a guest archived with it, which is hostile input.
func ReadTree(root, rel string, r io.Reader) error { return extract(root, rel, r, owner{}) }
