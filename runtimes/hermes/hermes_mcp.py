"""The Agent's MCP servers as Hermes tools (issue 39), through the runner's gateway only.

Hermes' own MCP client (tools/mcp_tool.py) needs the `mcp` Python package, which the image does
not carry, and would connect to whatever config.yaml names. A session instead gets
$MCP_SERVERS (JSON: server name -> the gateway's URL of it) and $MCP_GATEWAY_TOKEN (its own
gateway token, never a server's credential). At start each server's tools are listed through the
gateway (which lists only the allowed ones) over Streamable HTTP (MCP 2025-06-18: one JSON-RPC
message a POST, answered with JSON or an SSE stream) and registered in Hermes' registry as
`<server>_<tool>` in toolset `mcp-<server>`, as Hermes' own MCP tools are. A call the gateway
refuses, or the server fails, is the tool's error result, which the model reads.
"""

import json
import os
import re

_PROTOCOL = "2025-06-18"


def _messages(response):
    kind = response.headers.get("content-type", "")
    text = response.text
    if not text.strip():
        return []
    if "text/event-stream" in kind:
        out = []
        for event in re.split(r"\r?\n\r?\n", text):
            data = "\n".join(line[5:].lstrip(" ") for line in event.splitlines() if line.startswith("data:"))
            if data:
                try:
                    out.append(json.loads(data))
                except ValueError:
                    pass
        return out
    try:
        return [json.loads(text)]
    except ValueError:
        return []


class _Client:
    def __init__(self, server, url, token):
        import httpx

        self.server = server
        self._url = url
        self._token = token
        self._session = None
        self._id = 0
        self._http = httpx.Client(timeout=httpx.Timeout(660.0, connect=10.0))
        self._ready = False

    def _post(self, body):
        headers = {
            "authorization": "Bearer " + self._token,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": _PROTOCOL,
        }
        if self._session:
            headers["mcp-session-id"] = self._session
        response = self._http.post(self._url, headers=headers, content=json.dumps(body))
        self._session = response.headers.get("mcp-session-id") or self._session
        messages = _messages(response)
        if response.status_code >= 400 and not any("error" in m for m in messages):
            raise RuntimeError("MCP server %s: HTTP %d" % (self.server, response.status_code))
        return messages

    def request(self, method, params):
        if not self._ready and method != "initialize":
            self.request(
                "initialize",
                {"protocolVersion": _PROTOCOL, "capabilities": {}, "clientInfo": {"name": "agent-sessions", "version": "1"}},
            )
            self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
            self._ready = True
        self._id += 1
        wanted = self._id
        for message in self._post({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params}):
            if message.get("id") == wanted:
                if "error" in message:
                    raise _RpcError(str((message.get("error") or {}).get("message", "error")))
                return message.get("result") or {}
        raise RuntimeError("MCP server %s: no answer to %s" % (self.server, method))


class _RpcError(Exception):
    pass


def _handler(client, tool):
    def handle(args, **_kwargs):
        try:
            result = client.request("tools/call", {"name": tool, "arguments": args or {}})
        except Exception as error:  # a refusal of the gateway, or the server's failure: the model reads it
            return json.dumps({"error": str(error)})
        text = "\n".join(
            part.get("text", "") if part.get("type") == "text" else "[%s]" % part.get("type")
            for part in result.get("content") or []
        )
        return json.dumps({"error": text} if result.get("isError") else {"result": text})

    return handle


def register_gateway_tools(environ=None):
    """Registers the session's MCP tools; returns their toolsets (`mcp-<server>`), [] when none."""
    environ = os.environ if environ is None else environ
    listed, token = environ.get("MCP_SERVERS"), environ.get("MCP_GATEWAY_TOKEN")
    if not listed or not token:
        return []
    from tools.registry import registry

    toolsets = []
    for server, url in json.loads(listed).items():
        client = _Client(server, url, token)
        toolset = "mcp-" + server
        cursor = None
        while True:
            result = client.request("tools/list", {"cursor": cursor} if cursor else {})
            for tool in result.get("tools") or []:
                name = re.sub(r"[^A-Za-z0-9_-]", "_", "%s_%s" % (server, tool["name"]))[:64]
                schema = {
                    "name": name,
                    "description": tool.get("description") or "MCP tool %s of server %s" % (tool["name"], server),
                    "parameters": tool.get("inputSchema") or {"type": "object", "properties": {}},
                }
                registry.register(
                    name=name,
                    toolset=toolset,
                    schema=schema,
                    handler=_handler(client, tool["name"]),
                    description=schema["description"],
                )
            cursor = result.get("nextCursor")
            if not cursor:
                break
        toolsets.append(toolset)
    return toolsets
