"""
`knowledge serve`: lookup_knowledge over HTTP (hayhooks REST) and MCP, with health, auth and limits.

The hayhooks wrapper lives in `wrappers/lookup_knowledge/`; `app.py` builds and runs the server
around it; `guard.py` checks every request before it reaches the pipeline; `loadgen.py` drives
`knowledge bench serve`. docs/serving.md explains the choices.
"""
