"""``pdsim serve``: a simulated P/D cluster behind vLLM's OpenAI-compatible HTTP API and
its Prometheus metrics (docs/serve.md).

- ``live``: the adapter to the engine (a simulation taking requests as they come, its
  emissions per engine step as events);
- ``clock``: simulated time against the wall clock (``--speed``) and the driver;
- ``protocol``: vLLM's request fields, error bodies and the stated rules for prompt
  length, output length and token text;
- ``metrics``: ``/metrics`` under vLLM's names, per instance;
- ``app``: the routes (Starlette), the built-in proxy and the ``--pd-endpoints`` ports;
- ``server``: the uvicorn servers and a clean stop on SIGINT/SIGTERM;
- ``replay``: the request log and the config that replays it with ``pdsim run``.

Needs the ``serve`` extra (``pip install 'pdsim[serve]'``: starlette, uvicorn).
"""
