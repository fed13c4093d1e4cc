package policy

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/interpreter"
)

// The variables a rule's `when` condition may read (docs/design.md §5.8).
// The task.* ones are qualified names, so a misspelt one (task.bse) is
// refused when the file loads.
var celVariables = []struct {
	name string
	typ  *cel.Type
	// argument: the value comes from the call's arguments, not from the
	// tool or the task (AlwaysRefused).
	argument bool
}{
	{"tool", cel.StringType, false},
	{"class", cel.StringType, false},
	{"server", cel.StringType, false},
	{"writes", cel.BoolType, false},
	{"repository", cel.StringType, true},
	{"branch", cel.StringType, true},
	{"path", cel.StringType, true},
	{"from", cel.StringType, true},
	{"into", cel.StringType, true},
	{"creates_branch", cel.BoolType, true},
	{"attributes", cel.MapType(cel.StringType, cel.StringType), true},
	{"tenant", cel.StringType, false},
	{"labels", cel.MapType(cel.StringType, cel.StringType), false},
	{"task.repositories", cel.ListType(cel.StringType), false},
	{"task.base", cel.StringType, false},
	{"task.default_branch", cel.StringType, false},
	{"task.branch_prefix", cel.StringType, false},
}

// newEnv is the CEL environment conditions compile in: the variables
// above, and optional values (labels[?"env"].orValue("")).
func newEnv() (*cel.Env, error) {
	opts := []cel.EnvOption{cel.OptionalTypes()}
	for _, v := range celVariables {
		opts = append(opts, cel.Variable(v.name, v.typ))
	}
	return cel.NewEnv(opts...)
}

// condition is a compiled `when`.
type condition struct {
	text      string
	program   cel.Program
	arguments bool // it reads a variable that comes from the arguments
}

// compileCondition compiles text, which must be boolean. Its error is one
// line.
func compileCondition(env *cel.Env, text string) (*condition, error) {
	ast, iss := env.Compile(text)
	if iss.Err() != nil {
		errs := iss.Errors()
		if len(errs) == 0 {
			return nil, fmt.Errorf("its condition does not compile: %s", oneLine(iss.Err().Error()))
		}
		e := errs[0]
		return nil, fmt.Errorf("its condition does not compile: %s (at column %d of the condition)", e.Message, e.Location.Column()+1)
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("its condition is %s, not a bool", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("its condition cannot be prepared: %s", oneLine(err.Error()))
	}
	if lit := upperRepositoryLiteral(ast.NativeRep()); lit != "" {
		return nil, fmt.Errorf("its condition compares a repository name with %q, which could never match: names compare in lower case, as GitHub compares them, so write %q",
			lit, strings.ToLower(lit))
	}
	c := &condition{text: text, program: prg}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		for _, v := range celVariables {
			if ref.Name == v.name && v.argument {
				c.arguments = true
			}
		}
	}
	return c, nil
}

// eval is the condition's value for the call and task of act, or the
// error that kept it from having one.
func (k *condition) eval(act *activation) (bool, error) {
	out, _, err := k.program.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("it gave %v, not a bool", out.Value())
	}
	return b, nil
}

// activation resolves the condition's variables from the call and the task
// without building a map per decision.
type activation struct {
	c *Call
	t *Task
}

var _ interpreter.Activation = (*activation)(nil)

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "tool":
		return a.c.Tool, true
	case "class":
		return string(a.c.Class), true
	case "server":
		return a.c.Server, true
	case "writes":
		return a.c.writes(), true
	case "repository":
		return a.c.Repository, true // lower case (normalize)
	case "branch":
		return a.c.Branch, true
	case "path":
		return a.c.Path, true
	case "from":
		return a.c.From, true
	case "into":
		return a.c.Into, true
	case "creates_branch":
		return a.c.CreatesBranch, true
	case "attributes":
		if a.c.Attributes == nil {
			return map[string]string{}, true
		}
		return a.c.Attributes, true
	case "tenant":
		return a.t.Tenant, true
	case "labels":
		if a.t.Labels == nil {
			return map[string]string{}, true
		}
		return a.t.Labels, true
	case "task.repositories": // lower case (normalize)
		if a.t.Repositories == nil {
			return []string{}, true
		}
		return a.t.Repositories, true
	case "task.base":
		return a.t.Base, true
	case "task.default_branch":
		return a.t.DefaultBranch, true
	case "task.branch_prefix":
		return a.t.prefix(), true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// oneLine is the first line of s.
func oneLine(s string) string {
	s = strings.TrimPrefix(s, "ERROR: ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
