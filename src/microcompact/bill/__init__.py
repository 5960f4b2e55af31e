"""The bill: what a session costs with a provider's prompt cache, in one place.

- ``pricing``: prices and cache rules (presets, dollars per million tokens), shared by the engines, the
  proxy and ``replay --compare``;
- ``cache_usage``: what the provider's responses reported about its cache, per session
  (``CacheObservations``, which the price schedule reads);
- ``session_bill``: a session's bill against the uncompacted counterfactual, and the one pricing of a
  reported prompt (requests and summary requests alike);
- ``proxy_bills``: the proxy's bills by session id, its charges and cost headers;
- ``cost_line``: the proxy's ``proxy_cost`` telemetry line, written and read back;
- ``replay_cost``: the cache model ``replay --compare`` tallies a replay's requests with.

Nothing is imported here, so the ground layer (``config`` reads the prices) can import one module of the
package without loading the rest.
"""
