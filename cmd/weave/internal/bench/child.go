package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
)

// childSpec is what a child process measures (see Env.ChildCommand): one of its pointers is set.
type childSpec struct {
	Replicas int             `json:"replicas,omitempty"` // Env.Replicas
	Scale    *scaleChildSpec `json:"scale,omitempty"`
	Idle     *idleChildSpec  `json:"idle,omitempty"`
}

// RunChild is a child process's side of a measurement isolated from the parent (see
// Env.ChildCommand): it runs what spec (JSON, from the parent) describes, reads the parent's
// signals from in and writes what it measured to out, a JSON value a line.
func RunChild(ctx context.Context, env *Env, spec string, in io.Reader, out io.Writer) error {
	var sp childSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		return fmt.Errorf("child spec: %w", err)
	}
	env.Replicas = sp.Replicas
	switch {
	case sp.Scale != nil:
		return runScaleChild(ctx, env, *sp.Scale, out)
	case sp.Idle != nil:
		return runIdleChild(ctx, env, *sp.Idle, in, out)
	}
	return errors.New("child spec: nothing to measure")
}

// child is a running child process, seen from the parent.
type child struct {
	in  io.WriteCloser // the child's stdin: closing it tells the child to finish
	out *bufio.Scanner // the child's stdout, a JSON value a line
}

// read decodes the child's next line into v.
func (c *child) read(v any) error {
	if !c.out.Scan() {
		if err := c.out.Err(); err != nil {
			return fmt.Errorf("child process output: %w", err)
		}
		return errors.New("child process output: ended early")
	}
	if err := json.Unmarshal(c.out.Bytes(), v); err != nil {
		return fmt.Errorf("child process output %q: %w", c.out.Bytes(), err)
	}
	return nil
}

// signal writes a line to the child's stdin.
func (c *child) signal(line string) error {
	_, err := io.WriteString(c.in, line+"\n")
	return err
}

// runChild starts Env.ChildCommand with spec as its last argument, lets talk exchange lines with
// it, then closes its stdin and waits for it to exit.
func (e *Env) runChild(ctx context.Context, spec childSpec, talk func(*child) error) (err error) {
	spec.Replicas = e.Replicas
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	args := append(slices.Clone(e.ChildCommand[1:]), string(b))
	cmd := exec.CommandContext(ctx, e.ChildCommand[0], args...)
	cmd.Env = append(os.Environ(), e.ChildEnv...)
	cmd.Stderr = e.Progress
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("child process %s: %w", e.ChildCommand[0], err)
	}
	c := &child{in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(nil, 16<<20)
	terr := talk(c)
	in.Close()
	_, _ = io.Copy(io.Discard, out) // what a test binary prints after the child's lines
	if werr := cmd.Wait(); werr != nil {
		return errors.Join(terr, fmt.Errorf("child process %s: %w", e.ChildCommand[0], werr))
	}
	return terr
}
