"""The cluster around the engines, each part built by ``Simulation`` from what it uses:
the request table (``request_table``), the proxy that routes requests and hands them
over from P to D (``proxy``), the KV on its way and P's leases (``kv_transfers``),
scheduled outages and link degradations (``outages``) and live intake for ``pdsim
serve`` (``live_intake``)."""
