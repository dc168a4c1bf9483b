// pulumi-language-nodejs for the agent-sessions test bed.
//
// The Go module proxy reachable here does not serve Pulumi's own Node.js language host
// (github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3: its version list and
// release tag are refused, 403 "This module version is not available"), so scripts/testbed.d/pulumi.sh builds this small equivalent,
// written for this project against the LanguageRuntime gRPC protocol of sdk/v3 (same release as
// the CLI). It covers what the project uses: running a program (`pulumi preview/up/destroy`,
// Automation API local programs), required packages, policy packs and Node plugins through
// RunPlugin, `pulumi install`, `pulumi about`. Everything else answers Unimplemented.
//
// The program itself runs in @pulumi/pulumi's own entry point (cmd/run, cmd/run-policy-pack,
// cmd/run-plugin), resolved from the program's node_modules, with the `node` found on PATH
// (or $PULUMI_NODEJS_NODE, or the node baked in at build time, see DefaultNode).
//
// Runtime options (Pulumi.yaml `runtime.options`): typescript (default true: ts-node, as
// upstream; false: plain node, which on Node >= 23.6 also strips types from .ts files),
// nodeargs, tsconfig.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Version is set with -ldflags "-X main.Version=..." to the CLI's release.
var Version = "3.0.0"

// Exit code of @pulumi/pulumi's runners after they already printed a user-actionable error.
const exitAfterUserMessage = 32

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	mu            sync.Mutex
	engineAddress string
	tracing       string
}

func main() {
	h := &host{}
	for i := 1; i < len(os.Args); i++ {
		a := os.Args[i]
		switch {
		case a == "-tracing" || a == "--tracing":
			if i+1 < len(os.Args) {
				h.tracing = os.Args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-tracing=") || strings.HasPrefix(a, "--tracing="):
			h.tracing = a[strings.IndexByte(a, '=')+1:]
		case strings.HasPrefix(a, "-"):
			// Older CLIs passed runtime options as flags; options now come in ProgramInfo.
		default:
			if h.engineAddress == "" {
				h.engineAddress = a
			}
		}
	}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-nodejs: could not start the RPC server: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-nodejs: RPC server stopped: %v\n", err)
		os.Exit(1)
	}
}

// DefaultNode is the node binary to use when $PULUMI_NODEJS_NODE is unset (set at build time to the
// test bed's Node 24); if it is empty or missing, `node` is looked up on PATH like upstream does.
var DefaultNode = ""

func nodeBin() (string, error) {
	if p := os.Getenv("PULUMI_NODEJS_NODE"); p != "" {
		return p, nil
	}
	if DefaultNode != "" {
		if _, err := os.Stat(DefaultNode); err == nil {
			return DefaultNode, nil
		}
	}
	p, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("could not find node on the $PATH: %w", err)
	}
	return p, nil
}

// resolveModule finds a module file the way `require.resolve` does from dir.
func resolveModule(node, dir, module string) (string, error) {
	script := fmt.Sprintf("console.log(require.resolve(%q, {paths: [%q]}))", module, dir)
	cmd := exec.Command(node, "-e", script)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("could not find %s from %s: have the program's dependencies been installed "+
			"(npm install)? %w", module, dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

type options struct {
	typescript bool
	nodeargs   []string
	tsconfig   string
}

func programOptions(info *pulumirpc.ProgramInfo) (options, error) {
	o := options{typescript: true}
	if info == nil || info.Options == nil {
		return o, nil
	}
	m := info.Options.AsMap()
	if v, ok := m["typescript"]; ok {
		switch t := v.(type) {
		case bool:
			o.typescript = t
		case string:
			b, err := strconv.ParseBool(t)
			if err != nil {
				return o, fmt.Errorf("runtime option typescript: %w", err)
			}
			o.typescript = b
		}
	}
	if v, ok := m["nodeargs"].(string); ok && v != "" {
		o.nodeargs = strings.Fields(v)
	}
	if v, ok := m["tsconfig"].(string); ok {
		o.tsconfig = v
	}
	return o, nil
}

func programDir(info *pulumirpc.ProgramInfo, fallback string) string {
	if info != nil && info.ProgramDirectory != "" {
		return info.ProgramDirectory
	}
	if fallback != "" {
		return fallback
	}
	wd, _ := os.Getwd()
	return wd
}

func (h *host) Handshake(_ context.Context, req *pulumirpc.LanguageHandshakeRequest) (
	*pulumirpc.LanguageHandshakeResponse, error,
) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.EngineAddress != "" {
		h.engineAddress = req.EngineAddress
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: Version}, nil
}

type packageJSON struct {
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	Dependencies map[string]string `json:"dependencies"`
	Pulumi       struct {
		Resource         bool   `json:"resource"`
		Name             string `json:"name"`
		Version          string `json:"version"`
		Server           string `json:"server"`
		Parameterization *struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			Value   []byte `json:"value"`
		} `json:"parameterization"`
	} `json:"pulumi"`
}

// nodeModulesDirs lists node_modules directories from dir up to the file system root.
func nodeModulesDirs(dir string) []string {
	var dirs []string
	for d := dir; ; {
		nm := filepath.Join(d, "node_modules")
		if st, err := os.Stat(nm); err == nil && st.IsDir() {
			dirs = append(dirs, nm)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dirs
		}
		d = parent
	}
}

// walkPackages calls fn for every package.json of every package under a node_modules tree.
func walkPackages(nm string, seen map[string]bool, fn func(packageJSON)) {
	entries, err := os.ReadDir(nm)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(nm, name)
		if strings.HasPrefix(name, "@") {
			walkPackages(p, seen, fn)
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		if b, err := os.ReadFile(filepath.Join(p, "package.json")); err == nil {
			var pkg packageJSON
			if json.Unmarshal(b, &pkg) == nil {
				fn(pkg)
			}
		}
		walkPackages(filepath.Join(p, "node_modules"), seen, fn)
	}
}

func pluginOf(pkg packageJSON) (*pulumirpc.PackageDependency, bool) {
	if !pkg.Pulumi.Resource {
		return nil, false
	}
	name := pkg.Pulumi.Name
	if name == "" {
		name = strings.TrimPrefix(strings.TrimPrefix(pkg.Name, "@pulumi/"), "@")
	}
	version := pkg.Pulumi.Version
	if version == "" {
		version = pkg.Version
	}
	if version != "" && !strings.HasPrefix(version, "v") {
		version = "v" + version
	}
	dep := &pulumirpc.PackageDependency{Name: name, Kind: "resource", Version: version, Server: pkg.Pulumi.Server}
	if p := pkg.Pulumi.Parameterization; p != nil {
		dep.Parameterization = &pulumirpc.PackageParameterization{Name: p.Name, Version: p.Version, Value: p.Value}
	}
	return dep, true
}

func requiredPackages(dir string) []*pulumirpc.PackageDependency {
	var deps []*pulumirpc.PackageDependency
	keys := map[string]bool{}
	seen := map[string]bool{}
	for _, nm := range nodeModulesDirs(dir) {
		walkPackages(nm, seen, func(pkg packageJSON) {
			if dep, ok := pluginOf(pkg); ok {
				key := dep.Name + "@" + dep.Version
				if dep.Parameterization != nil {
					key += "/" + dep.Parameterization.Name + "@" + dep.Parameterization.Version
				}
				if !keys[key] {
					keys[key] = true
					deps = append(deps, dep)
				}
			}
		})
	}
	return deps
}

func (h *host) GetRequiredPackages(_ context.Context, req *pulumirpc.GetRequiredPackagesRequest) (
	*pulumirpc.GetRequiredPackagesResponse, error,
) {
	return &pulumirpc.GetRequiredPackagesResponse{Packages: requiredPackages(programDir(req.Info, ""))}, nil
}

func (h *host) GetRequiredPlugins(_ context.Context, req *pulumirpc.GetRequiredPluginsRequest) (
	*pulumirpc.GetRequiredPluginsResponse, error,
) {
	var plugins []*pulumirpc.PluginDependency
	for _, d := range requiredPackages(programDir(req.Info, req.Pwd)) {
		if d.Parameterization == nil {
			plugins = append(plugins, &pulumirpc.PluginDependency{
				Name: d.Name, Kind: d.Kind, Version: d.Version, Server: d.Server,
			})
		}
	}
	return &pulumirpc.GetRequiredPluginsResponse{Plugins: plugins}, nil
}

func exitCode(err error) (int, bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return 128 + int(ws.Signal()), true
			}
			return ws.ExitStatus(), true
		}
		return ee.ExitCode(), true
	}
	return 0, false
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	node, err := nodeBin()
	if err != nil {
		return nil, err
	}
	dir := programDir(req.Info, req.Pwd)
	opts, err := programOptions(req.Info)
	if err != nil {
		return nil, err
	}
	runPath, err := resolveModule(node, dir, "@pulumi/pulumi/cmd/run")
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	h.mu.Lock()
	engine := h.engineAddress
	h.mu.Unlock()

	args := append([]string{}, opts.nodeargs...)
	args = append(args, runPath)
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.MonitorAddress)
	add("engine", engine)
	add("organization", req.Organization)
	add("project", req.Project)
	if req.Info != nil {
		add("root-directory", req.Info.RootDirectory)
	}
	add("stack", req.Stack)
	add("pwd", req.Pwd)
	if req.DryRun {
		args = append(args, "--dry-run")
	}
	add("parallel", strconv.Itoa(int(req.Parallel)))
	add("tracing", h.tracing)
	program := ""
	if req.Info != nil {
		program = req.Info.EntryPoint
	}
	if program == "" {
		program = req.Program //nolint:staticcheck // older engines
	}
	if program == "" {
		program = "."
	}
	args = append(args, program)
	args = append(args, req.Args...)

	config, err := json.Marshal(orEmpty(req.Config))
	if err != nil {
		return nil, err
	}
	secretKeys, err := json.Marshal(orEmptySlice(req.ConfigSecretKeys))
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"PULUMI_CONFIG="+string(config),
		"PULUMI_CONFIG_SECRET_KEYS="+string(secretKeys),
		"PULUMI_NODEJS_TYPESCRIPT="+strconv.FormatBool(opts.typescript),
	)
	if opts.tsconfig != "" {
		env = append(env, "PULUMI_NODEJS_TSCONFIG_PATH="+opts.tsconfig)
	}

	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("could not start node: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGINT)
		err = <-done
	}
	if err == nil {
		return &pulumirpc.RunResponse{}, nil
	}
	if code, ok := exitCode(err); ok {
		if code == exitAfterUserMessage {
			return &pulumirpc.RunResponse{Bail: true}, nil
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("Program exited with non-zero exit code: %d", code)}, nil
	}
	return &pulumirpc.RunResponse{Error: fmt.Sprintf("Problem executing program: %v", err)}, nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orEmptySlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// streamWriter turns process output into RunPlugin/InstallDependencies messages.
type streamWriter struct {
	mu   *sync.Mutex
	send func(b []byte) error
}

func (w streamWriter) Write(p []byte) (int, error) {
	b := append([]byte(nil), p...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.send(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest, srv grpc.ServerStreamingServer[pulumirpc.RunPluginResponse]) error {
	node, err := nodeBin()
	if err != nil {
		return err
	}
	dir := programDir(req.Info, req.Pwd)
	opts, err := programOptions(req.Info)
	if err != nil {
		return err
	}
	var args []string
	args = append(args, opts.nodeargs...)
	if req.Kind == "analyzer" {
		// A policy pack: run-policy-pack ENGINE PROGRAM, with the pack's own @pulumi/pulumi.
		runPath, err := resolveModule(node, dir, "@pulumi/pulumi/cmd/run-policy-pack")
		if err != nil {
			return err
		}
		args = append(args, runPath)
		args = append(args, req.Args...)
		args = append(args, dir)
	} else {
		// A Node plugin (component provider): run-plugin PROGRAM ARGS...
		runPath, err := resolveModule(node, dir, "@pulumi/pulumi/cmd/run-plugin")
		if err != nil {
			return err
		}
		args = append(args, runPath, dir)
		args = append(args, req.Args...)
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Env = append(cmd.Env, "PULUMI_NODEJS_TYPESCRIPT="+strconv.FormatBool(opts.typescript))
	var mu sync.Mutex
	cmd.Stdout = streamWriter{&mu, func(b []byte) error {
		return srv.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: b}})
	}}
	cmd.Stderr = streamWriter{&mu, func(b []byte) error {
		return srv.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: b}})
	}}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("could not start node: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-srv.Context().Done():
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-done
		return srv.Context().Err()
	}
	code := 0
	if err != nil {
		c, ok := exitCode(err)
		if !ok {
			return err
		}
		code = c
	}
	mu.Lock()
	defer mu.Unlock()
	return srv.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(code)}})
}

func (h *host) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	srv grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	dir := programDir(req.Info, req.Directory)
	npm, err := exec.LookPath("npm")
	if err != nil {
		return status.Error(codes.FailedPrecondition, "npm not found on PATH")
	}
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund")
	cmd.Dir = dir
	var mu sync.Mutex
	cmd.Stdout = streamWriter{&mu, func(b []byte) error {
		return srv.Send(&pulumirpc.InstallDependenciesResponse{Stdout: b})
	}}
	cmd.Stderr = streamWriter{&mu, func(b []byte) error {
		return srv.Send(&pulumirpc.InstallDependenciesResponse{Stderr: b})
	}}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm install failed: %w", err)
	}
	return nil
}

func (h *host) About(_ context.Context, _ *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	node, err := nodeBin()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{Executable: node, Version: strings.TrimSpace(string(out))}, nil
}

func (h *host) GetProgramDependencies(_ context.Context, req *pulumirpc.GetProgramDependenciesRequest) (
	*pulumirpc.GetProgramDependenciesResponse, error,
) {
	dir := programDir(req.Info, req.Pwd)
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return nil, fmt.Errorf("reading package.json: %w", err)
	}
	var pkg packageJSON
	if err := json.Unmarshal(b, &pkg); err != nil {
		return nil, fmt.Errorf("parsing package.json: %w", err)
	}
	var deps []*pulumirpc.DependencyInfo
	for name, want := range pkg.Dependencies {
		version := want
		for _, nm := range nodeModulesDirs(dir) {
			if b, err := os.ReadFile(filepath.Join(nm, name, "package.json")); err == nil {
				var dep packageJSON
				if json.Unmarshal(b, &dep) == nil && dep.Version != "" {
					version = dep.Version
					break
				}
			}
		}
		deps = append(deps, &pulumirpc.DependencyInfo{Name: name, Version: version})
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: deps}, nil
}
