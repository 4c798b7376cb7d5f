package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSkipsGoThroughTestenv finds every call of a testing Skip method
// outside internal/testenv: a test that skips by itself cannot be made to
// fail by BPFCOL_REQUIRE_BPF=1, so a CI runner missing a tool, a file or a
// kernel feature would pass it silently. internal/testenv names the
// requirement and decides.
func TestSkipsGoThroughTestenv(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "_build", ".cache", "bin", filepath.Join("internal", "testenv"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
					t.Errorf("%s:%d: %s skips by itself: use internal/testenv (LookPath, RequireFile, RequirePlatform, Kernel, Unavailable)",
						rel, fset.Position(call.Pos()).Line, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files found under %s", files, root)
	}
}
