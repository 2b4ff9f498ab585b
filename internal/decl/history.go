package decl

import (
	"bytes"
	"os/exec"
	"path/filepath"
)

// committedHistory is the history to check against when the output file is
// missing from the working tree: the manifest of the output that the
// committed (HEAD) version of the declarations file names, read from HEAD.
// Deleting the generated file (rm *_gen.go; go generate) or moving it with
// output: therefore does not let a rename through unchecked. It returns no
// history, and no error, outside a git work tree, without git, or when HEAD
// has neither file (a first generate).
func committedHistory(declPath string) (History, error) {
	dir := filepath.Dir(declPath)
	src, ok := gitShow(dir, filepath.Base(declPath))
	if !ok {
		return nil, nil
	}
	f, _ := Parse(declPath, src)
	if f == nil {
		return nil, nil // HEAD's declarations do not parse: nothing to learn from them
	}
	out, ok := gitShow(dir, f.Output)
	if !ok {
		return nil, nil
	}
	return ReadManifest("HEAD:"+filepath.ToSlash(filepath.Join(dir, f.Output)), out)
}

// gitShow returns the contents of rel (slash-separated, relative to dir) as
// committed at HEAD of the git work tree holding dir.
func gitShow(dir, rel string) ([]byte, bool) {
	var out bytes.Buffer
	cmd := exec.Command("git", "-C", dir, "show", "HEAD:./"+filepath.ToSlash(rel))
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, false
	}
	return out.Bytes(), true
}
