"""Which of Hermes' tool modules a session imports (hermes-agent 0.19.0).

At its start Hermes (`model_tools`, via `tools.registry.discover_builtin_tools`) reads and parses
every file of its `tools/` package and imports each that registers a tool: 32 modules (browser,
web, vision, kanban, cron, delegation, ...) and what they import, whatever toolsets the session
may use; ~0.3 s of CPU of a resume's ~1 s on the session's half CPU. A session is given only the
toolsets in $HERMES_TOOLSETS (runtimes/hermes/hermes_acp.py, 1.), so only the modules registering
one of their tools are needed.

Which module registers which tool is known only by importing them all, so the image's build does
it once, with Hermes' own discovery (`python hermes_tools.py --write-index PATH`, run by
scripts/testbed.d/hermes-image.sh), and records, in discovery's order, each module with the tools
(name, toolset) it registers: those whose handler it defines, else those that appeared while it
was imported. At a session's start `restrict_discovery`
makes discovery import only the modules with a tool the toolsets name (Hermes' static
`resolve_toolset`) or a tool registered into one of them, each as the stock discovery does. With no
index, an unreadable one, or a toolset the index does not cover, discovery is left as it is.
"""

import json
import logging
import os
import sys

INDEX_DEFAULT = "/opt/hermes/agent-sessions-tool-modules.json"
_logger = logging.getLogger("tools.registry")


def write_index(path):
    """Runs Hermes' discovery, recording each module's new tools; writes the index to `path`."""
    import tools.registry as tools_registry

    registry = tools_registry.registry
    stock_importlib = tools_registry.importlib
    modules = []

    class _Recording:
        @staticmethod
        def import_module(name):
            before = set(registry.get_tool_to_toolset_map())
            module = stock_importlib.import_module(name)
            after = registry.get_tool_to_toolset_map()
            modules.append([name, sorted([tool, after[tool]] for tool in set(after) - before)])
            return module

    tools_registry.importlib = _Recording
    try:
        tools_registry.discover_builtin_tools()
    finally:
        tools_registry.importlib = stock_importlib
    # A module that imports another (delegate_tool imports terminal_tool) was recorded with both's
    # tools: a tool goes to the discovered module its handler is defined in, when there is one.
    names = {name for name, _ in modules}
    owner = {}
    for name, tools in modules:
        for tool, _ in tools:
            handler = getattr(registry.get_entry(tool), "handler", None)
            defined_in = getattr(handler, "__module__", None)
            owner[tool] = defined_in if defined_in in names else name
    modules = [[name, [[t, s] for _, tools in modules for t, s in tools if owner[t] == name]] for name, _ in modules]
    if not any(tools for _, tools in modules):
        raise SystemExit("hermes_tools: discovery registered no tools; no index written")
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"version": 1, "modules": modules}, out, indent=1)
        out.write("\n")


def _read_index(path):
    try:
        with open(path, encoding="utf-8") as src:
            index = json.load(src)
        return [(str(name), [(str(t), str(s)) for t, s in tools]) for name, tools in index["modules"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def modules_for(toolsets, index):
    """The index's modules a session with `toolsets` needs, in discovery's order; None when the
    index does not cover one of the toolsets' tools (then every module is needed)."""
    from toolsets import resolve_toolset

    named = set()
    for toolset in toolsets:
        resolved = resolve_toolset(toolset, include_registry=False)
        if not resolved:
            return None  # a toolset only a registry (plugin, alias) defines: not ours to guess
        named.update(resolved)
    wanted = set(toolsets)
    chosen = [name for name, tools in index if any(t in named or s in wanted for t, s in tools)]
    covered = {t for name, tools in index if name in chosen for t, _ in tools}
    return chosen if named <= covered else None


def restrict_discovery(toolsets, path=None):
    """Makes Hermes' tool discovery import only what `toolsets` need (see above). Before
    `model_tools` is imported (it runs discovery at import). True when restricted."""
    index = _read_index(path or os.environ.get("HERMES_TOOL_INDEX", INDEX_DEFAULT))
    if not index:
        return False
    chosen = modules_for(toolsets, index)
    if chosen is None:
        return False
    import importlib

    import tools.registry as tools_registry

    stock = tools_registry.discover_builtin_tools

    def discover_builtin_tools(tools_dir=None):
        if tools_dir is not None:
            return stock(tools_dir)
        imported = []
        for name in chosen:  # as the stock discovery: a module that fails is logged and skipped
            try:
                importlib.import_module(name)
                imported.append(name)
            except Exception as error:
                _logger.warning("Could not import tool module %s: %s", name, error)
        return imported

    tools_registry.discover_builtin_tools = discover_builtin_tools
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--write-index":
        raise SystemExit("usage: hermes_tools.py --write-index PATH")
    write_index(sys.argv[2])
