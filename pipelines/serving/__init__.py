"""
`knowledge serve`: lookup_knowledge over HTTP (REST) and MCP, with health, auth and limits.

The hayhooks wrapper in `wrappers/lookup_knowledge/` is the one door of every served call;
`app.py` builds and runs the server around it (`rest_app.py`, `mcp_app.py`); `guard.py` checks
every request before it reaches the pipeline; `loadgen.py` drives `knowledge bench serve`.
docs/serving.md explains the choices.
"""
