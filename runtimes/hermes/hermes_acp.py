"""`hermes acp` (hermes-agent 0.19.0) as a session runs it: the ACP stdio server of
acp_adapter.entry, with changes made before it starts: six for a fault of the stock server in a
session, three for the time a turn takes (a session has half a CPU; see 7.-9. below):

1. Tools: the stock server gives every ACP session the whole `hermes-acp` toolset (web, browser,
   vision, delegation, code execution, memory, ...) whatever config.yaml says. A session gets only
   the toolsets in $HERMES_TOOLSETS (default `file,terminal`: read_file, write_file, patch,
   search_files, terminal, process).
2. Failed turns: a failed model call ends the stock turn with `end_turn` and an error text posing
   as the answer, and leaves the unanswered user message in the history (the next message is
   then merged into it). A turn Hermes gives up on (a stream still cut off after its
   continuation retries) ends as a "success" with the partial text. Here either answers nothing,
   is rolled back from the history (and state.db), and says so in the prompt result:
   `_meta.agentSessions = {failed: true, error}`.
3. Tool completion: the stock step callback passes a tool's arguments as a JSON string to
   build_tool_complete, which expects a dict and raises for write_file/patch, so those calls
   never report completion. The arguments are parsed first.
4. Usage: the stock prompt result reports the agent's running session totals (every turn since
   the process started), not the turn's; here it reports the turn's own tokens (0 when the model
   reported none, which the adapter records as unavailable).
5. Endpoint: a stock `session/load` restores the model, provider and base URL the session was
   created with; here every session uses config.yaml's, which the adapter writes from the Agent
   at every start (an Agent whose endpoint changed is followed).
6. Tool names: a stock `tool_call` update carries a display title ("write: a.txt") only; here its
   `_meta.agentSessions.tool` names the tool (`write_file`).
7. TLS contexts: built once per setting, not three times a model call.
8. The cost estimate's price list: fetched in the background, not before a turn's answer.
9. The first turn's imports: made once the session is open, not in the first request.
10. Tool modules: only those of the session's toolsets are imported at start (hermes_tools.py).
11. Plugins: with the default toolsets (file, terminal: Hermes' own modules) no plugin is
    discovered or loaded (`HERMES_SAFE_MODE`, below).
12. Garbage collection: off while Hermes loads, then what it loaded is frozen out of the
    collector's way (below).
13. The Ollama probe at every agent start: skipped where its answer is known (below).
14. Skills (issue 39): the session's skills, mounted read-only at /skills, are listed in the system
    prompt ($AGENT_SESSIONS_SKILLS_PROMPT, written by hermes-agent.ts): Hermes' own skills index
    needs its skills toolset (skill_manage writes skills), which a session does not get.

Run with the venv's interpreter: /opt/hermes/bin/python /app/runtimes/hermes/hermes_acp.py
"""

# 12. The cyclic garbage collector, while Hermes loads (~200,000 objects: modules, classes, the
# OpenAI SDK's and ACP's pydantic models), ran again and again over objects that all live as long
# as the process: ~0.1-0.2 s of a start's ~1 s of CPU (measured in the image at --cpus 0.5), and
# each later full collection scanned them again (0.12 s). It is off until the first turn's imports
# are done (9.), then those objects are frozen (`gc.freeze`: never scanned again; of them a full
# collection found ~700 garbage, kept) and it is on again for everything after.
import gc

gc.disable()

import asyncio
import concurrent.futures
import importlib
import json
import os
import threading
import time
import urllib.parse

import hermes_tools

_TOOLSETS = [t.strip() for t in os.environ.get("HERMES_TOOLSETS", "file,terminal").split(",") if t.strip()]

# 10. and 11., before Hermes is imported: its `model_tools` discovers tools and plugins at import.
# 11. Hermes' safe mode (its `--safe-mode`, hermes-agent 0.19.0) skips three things at start:
# plugin discovery, shell hooks from config.yaml and MCP servers from config.yaml. The adapter
# writes config.yaml with neither hooks nor MCP servers (runtimes/hermes/hermes-agent.ts), and
# the plugins discovery would load are the bundled backends of the browser, web, image and video
# generation, dashboard auth and Spotify tools (~0.2 s of CPU at every start; one, dashboard
# auth, hashes a password with scrypt at import) and lazy platform adapters (gateway chats);
# other plugins load only when config.yaml enables them, which it does not. None serves the file
# or terminal toolsets, so with only those a session loses nothing; another toolset (e.g. web,
# whose search backends are plugins) keeps the plugins.
if set(_TOOLSETS) <= {"file", "terminal"}:
    os.environ["HERMES_SAFE_MODE"] = "1"
# 10. The tool modules of other toolsets register tools no session is given (1.).
hermes_tools.restrict_discovery(_TOOLSETS)

import acp_adapter.events as _events
import agent.agent_init as _agent_init
import acp_adapter.server as _server
import acp_adapter.session as _session
import agent.model_metadata as _model_metadata
import agent.ssl_verify as _ssl_verify
import agent.usage_pricing as _usage_pricing
import httpx
import run_agent as _run_agent


# 14. MCP (issue 39): the Agent's MCP servers' tools, through the runner's gateway only
# (hermes_mcp.py), in toolsets `mcp-<server>` beside $HERMES_TOOLSETS. Listed once, at start.
import hermes_mcp

try:
    _MCP_TOOLSETS = hermes_mcp.register_gateway_tools()
except Exception as _error:  # the session runs without them, and says so on stderr
    import sys

    print("hermes: the MCP servers' tools could not be listed: %s" % _error, file=sys.stderr)
    _MCP_TOOLSETS = []


def _allowlisted_toolsets(toolsets=None, mcp_server_names=None):
    return list(_TOOLSETS) + list(_MCP_TOOLSETS)


_session._expand_acp_enabled_toolsets = _allowlisted_toolsets
_server._expand_acp_enabled_toolsets = _allowlisted_toolsets

_stock_make_agent = _session.SessionManager._make_agent


def _make_agent(self, *, session_id, cwd, **_restored):
    return _stock_make_agent(self, session_id=session_id, cwd=cwd)


_session.SessionManager._make_agent = _make_agent

_stock_run_conversation = _run_agent.AIAgent.run_conversation


_TOKEN_COUNTERS = {
    "prompt_tokens": "session_prompt_tokens",
    "completion_tokens": "session_completion_tokens",
    "total_tokens": "session_total_tokens",
}


def _run_conversation(self, *args, **kwargs):
    self._agent_sessions_failure = None
    before = {key: int(getattr(self, counter, 0) or 0) for key, counter in _TOKEN_COUNTERS.items()}
    result = _stock_run_conversation(self, *args, **kwargs)
    if isinstance(result, dict):
        turn = {key: int(getattr(self, counter, 0) or 0) - before[key] for key, counter in _TOKEN_COUNTERS.items()}
        result = {**result, **turn}
    # A failed call, or a turn Hermes gave up on with an error (e.g. a stream still cut off after
    # its continuation retries: `completed: False, partial: True`) — never a partial "success".
    if isinstance(result, dict) and (
        result.get("failed") or (result.get("completed") is False and result.get("error"))
    ):
        self._agent_sessions_failure = str(result.get("error") or "the model call failed")
        # No error text as the answer: the failure travels in the prompt result.
        result = {**result, "final_response": ""}
    return result


_run_agent.AIAgent.run_conversation = _run_conversation

_stock_prompt = _server.HermesACPAgent.prompt


async def _prompt(self, prompt, session_id, **kwargs):
    state = self.session_manager.get_session(session_id)
    before = list(state.history) if state is not None else None
    response = await _stock_prompt(self, prompt=prompt, session_id=session_id, **kwargs)
    agent = getattr(state, "agent", None) if state is not None else None
    failure = getattr(agent, "_agent_sessions_failure", None)
    if failure is not None and before is not None:
        agent._agent_sessions_failure = None
        state.history = before
        self.session_manager.save_session(session_id)
        meta = dict(response.field_meta or {})
        meta["agentSessions"] = {"failed": True, "error": failure}
        response.field_meta = meta
    return response


_server.HermesACPAgent.prompt = _prompt

_stock_build_tool_complete = _events.build_tool_complete


def _build_tool_complete(tool_call_id, tool_name, result=None, function_args=None, **kwargs):
    if isinstance(function_args, str):
        try:
            function_args = json.loads(function_args)
        except ValueError:
            function_args = None
    if not isinstance(function_args, dict):
        function_args = None
    return _stock_build_tool_complete(tool_call_id, tool_name, result=result, function_args=function_args, **kwargs)


_events.build_tool_complete = _build_tool_complete

_stock_build_tool_start = _events.build_tool_start


def _build_tool_start(tool_call_id, tool_name, arguments, **kwargs):
    update = _stock_build_tool_start(tool_call_id, tool_name, arguments, **kwargs)
    meta = dict(update.field_meta or {})
    meta["agentSessions"] = {"tool": str(tool_name)}
    update.field_meta = meta
    return update


_events.build_tool_start = _build_tool_start

# 7. TLS contexts: every model call builds a fresh OpenAI client over a fresh httpx.Client (three
# transports: its own and the http:// and https:// mounts), and each loads the CA bundle anew
# (httpx's create_ssl_context with verify=True), even for an http:// endpoint: ~3 bundle loads,
# most of a turn's CPU time (measured: ~40 of ~80 ms a turn; a session has 0.5 CPU). The context
# those calls would build is built once per setting and shared: the same certificates, the same
# checks (an SSLContext is safe to share between connections and threads).
_stock_resolve_httpx_verify = _ssl_verify.resolve_httpx_verify
_CA_ENV = ("HERMES_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_tls_contexts = {}
_tls_lock = threading.Lock()


def _resolve_httpx_verify(*, ca_bundle=None, ssl_verify=None, base_url=""):
    key = (ca_bundle, repr(ssl_verify), tuple(os.environ.get(name) for name in _CA_ENV))
    with _tls_lock:
        verify = _tls_contexts.get(key)
        if verify is None:
            verify = _stock_resolve_httpx_verify(ca_bundle=ca_bundle, ssl_verify=ssl_verify, base_url=base_url)
            if verify is False:
                return verify  # verification off (config): nothing to load, and its warning each time
            # True is httpx's default context (SSL_CERT_FILE, SSL_CERT_DIR, else certifi's bundle).
            verify = httpx.create_ssl_context() if verify is True else verify
            _tls_contexts[key] = verify
    return verify


_ssl_verify.resolve_httpx_verify = _resolve_httpx_verify

# 13. At every agent start (a session's open, so every resume) Hermes asks whether its endpoint
# is an Ollama, to send Ollama's `num_ctx` with each chat request if so: five GETs one after the
# other (LM Studio's /api/v1/models, Ollama's /api/tags, llama.cpp's /v1/props and /props, vLLM's
# /version, at the endpoint's root: its path less `/v1`), ~0.2-0.3 s on a session's half CPU. A
# session's endpoint is always the runner's model gateway (runner/gateway/session-gateway.ts sets
# MODEL_BASE_URL), with the Agent's endpoint's path, and the gateway forwards nothing outside that
# path: with a path ending in `/v1`, Ollama's /api/tags is outside, refused, so the answer is
# always "not Ollama" and `num_ctx` never sent. That answer is given here without the GETs (the
# model's requests recorded before and after: the same); any other path is probed as before.
_stock_query_ollama_num_ctx = _agent_init.query_ollama_num_ctx


def _query_ollama_num_ctx(model, base_url, api_key=""):
    if urllib.parse.urlsplit(base_url or "").path.rstrip("/").endswith("/v1"):
        return None
    return _stock_query_ollama_num_ctx(model, base_url, api_key=api_key)


_agent_init.query_ollama_num_ctx = _query_ollama_num_ctx


def _in_spare_time():
    """Lowers the calling thread's priority to the lowest (on Linux nice is per thread): the
    price-list fetch of 8. (its CA bundle loads, its parsing) takes only CPU time no turn wants.
    Nothing waits for it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:
        pass


# 8. The cost estimate: after each model call Hermes prices it, and for a custom endpoint its price
# list is the endpoint's `/models`, read after probing which local server it is (LM Studio,
# Ollama, llama.cpp, vLLM: five GETs, not remembered when none of them answers): seven requests
# through the runner's gateway to the provider, one after the other, before the turn's answer, on
# a session's first turn and again on the first after every 5 minutes (the list's cache) — so
# the first request after a pause paid them. The estimate (Hermes' `estimated_cost_usd` in
# state.db; the adapter reports the turn's tokens, never a cost) now uses the list last fetched,
# and a stale or missing one is fetched again in the background: the same requests, off the turn.
_stock_fetch_endpoint_model_metadata = _model_metadata.fetch_endpoint_model_metadata
_metadata_refreshing = set()
_metadata_lock = threading.Lock()


def _refresh_endpoint_model_metadata(base_url, api_key, key):
    _in_spare_time()
    try:
        _stock_fetch_endpoint_model_metadata(base_url, api_key=api_key, force_refresh=True)
    except Exception:  # as the stock fetch: no list, no endpoint price
        pass
    finally:
        with _metadata_lock:
            _metadata_refreshing.discard(key)


def _endpoint_model_metadata_for_pricing(base_url, api_key="", force_refresh=False):
    key = _model_metadata._normalize_base_url(base_url)
    if not key or _model_metadata._is_openrouter_base_url(key):
        return _stock_fetch_endpoint_model_metadata(base_url, api_key=api_key, force_refresh=force_refresh)
    cached = _model_metadata._endpoint_model_metadata_cache.get(key)
    fetched_at = _model_metadata._endpoint_model_metadata_cache_time.get(key, 0)
    if cached is not None and not force_refresh and time.time() - fetched_at < _model_metadata._ENDPOINT_MODEL_CACHE_TTL:
        return cached
    with _metadata_lock:
        if key not in _metadata_refreshing:
            _metadata_refreshing.add(key)
            threading.Thread(
                target=_refresh_endpoint_model_metadata,
                args=(base_url, api_key, key),
                name="agent-sessions-price-list",
                daemon=True,
            ).start()
    return cached if cached is not None else {}


_usage_pricing.fetch_endpoint_model_metadata = _endpoint_model_metadata_for_pricing

# 9. The first turn: Hermes imports the OpenAI SDK's resources (all of them, ~0.25 s of CPU), its
# conversation loop and their helpers at its first model call, so a session's first request took
# ~0.5-1 s longer than the next ones. They are imported once the ACP session is open, in the
# background (Ready is not delayed), and a turn starts after that (never two threads importing the
# same modules at once); then the endpoint's price list is fetched (8.), as the first turn would.
# The list is hermes-agent 0.19.0's (`python -X importtime` over a first turn); a name it lacks is
# skipped.
_FIRST_TURN_MODULES = (
    "openai.resources.chat",
    "unittest.mock",
    "agent.conversation_loop",
    "agent.chat_completion_helpers",
    "agent.coding_context",
    "agent.system_prompt",
    "agent.credits_tracker",
    "agent.kanban_stop",
    "agent.rate_limit_tracker",
    "agent.aux_accounting",
    "agent.verification_stop",
    "agent.verify_hooks",
    "agent.title_generator",
    "agent.turn_finalizer",
    "agent.async_utils",
    "acp_adapter.edit_approval",
    "hermes_cli.nous_subscription",
    "hermes_cli.profiles",
    "hermes_cli.skin_engine",
    "hermes_cli.moa_config",
    "tools.hook_output_spill",
    "netrc",
)
_warmed = concurrent.futures.Future()
_warm_lock = threading.Lock()


def _warm_up(endpoint):
    # At the normal priority: a turn waits for it (a thread at nice 19 would keep it waiting while
    # anything else in the session, e.g. the exec'd agent's build, takes the CPU).
    for name in _FIRST_TURN_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # an optional module of another version: the turn imports what it needs
            pass
    _with_session_skills()
    _collect_again()
    _warmed.set_result(None)
    if endpoint is not None:
        _endpoint_model_metadata_for_pricing(*endpoint)


def _with_session_skills():
    """14.: the session's skills after Hermes' stable system prompt (a turn waits for the warm-up)."""
    skills = os.environ.get("AGENT_SESSIONS_SKILLS_PROMPT", "")
    if not skills:
        return
    system_prompt = importlib.import_module("agent.system_prompt")
    stock = system_prompt.build_system_prompt_parts
    if getattr(stock, "_agent_sessions_skills", False):
        return

    def with_skills(agent, system_message=None):
        parts = stock(agent, system_message=system_message)
        parts["stable"] = "\n\n".join(p for p in (parts.get("stable", ""), skills) if p)
        return parts

    with_skills._agent_sessions_skills = True
    system_prompt.build_system_prompt_parts = with_skills


def _collect_again():
    """12.: what is loaded so far is frozen, and the collector on again (once)."""
    with _warm_lock:
        if not gc.isenabled():
            gc.freeze()
            gc.enable()


# Should no session ever be opened (no warm-up), the collector is on again anyway.
_collect_anyway = threading.Timer(60.0, _collect_again)
_collect_anyway.daemon = True
_collect_anyway.start()


def _start_warm_up(endpoint):
    with _warm_lock:
        if _warmed.running() or _warmed.done():
            return
        _warmed.set_running_or_notify_cancel()
    threading.Thread(target=_warm_up, args=(endpoint,), name="agent-sessions-warm-up", daemon=True).start()


def _warming_after(stock):
    async def opened(self, *args, **kwargs):
        response = await stock(self, *args, **kwargs)
        state = self.session_manager.get_session(kwargs.get("session_id") or getattr(response, "session_id", None))
        agent = getattr(state, "agent", None)
        base_url, api_key = getattr(agent, "base_url", None), getattr(agent, "api_key", "")
        _start_warm_up((base_url, api_key if isinstance(api_key, str) else "") if base_url else None)
        return response

    return opened


_server.HermesACPAgent.new_session = _warming_after(_server.HermesACPAgent.new_session)
_server.HermesACPAgent.load_session = _warming_after(_server.HermesACPAgent.load_session)


async def _prompt_when_warm(self, prompt, session_id, **kwargs):
    if _warmed.running():
        await asyncio.wrap_future(_warmed)
    return await _prompt(self, prompt=prompt, session_id=session_id, **kwargs)


_server.HermesACPAgent.prompt = _prompt_when_warm

if __name__ == "__main__":
    from acp_adapter.entry import main

    main([])
