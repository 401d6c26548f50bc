"""One harness for tests and benchmarks. Nothing here is imported by the gateway itself.

- `process`: `Server`, a subprocess on a loopback port (log file, readiness probe, stop of its
  process group, log tail in errors); `free_port`.
- `starters`: the gateway, the fake upstream and the bare `forwarder` as processes;
  `gateways`: several gateways started at once, and the wait for their embedder;
  `cached_gateway`: the gateway with the semantic cache on, filled and probed for hits.
- `redis_server`, `prometheus`, `nginx`: the other servers, as processes.
- `inprocess`: the gateway application in this process (`ServerThread`, `GatewayServer`).
- `configs`, `fake_settings`: config files and test settings from dicts.
- `load`: closed-loop and open-loop load generators over aiohttp; `hey`: the hey program as
  an external generator (one fixed body); `prompts`: questions no two alike, for load that
  must miss the cache.
- `sync_http`: blocking HTTP for probes and control calls; `procstat`: /proc readings;
  `cpu`: CPU over a benchmark phase, by process group and for the whole machine; `pyspy`: a
  py-spy profile of a server under load, summarized.
- `replies`: chat answers read alike, plain or streamed; `metrics`: /metrics samples.
- `inner_probe`: a read-only probe inside a server process; `stream_lags`: a follower of the
  cache's Redis Streams (delivery lag per event).
- `stats`, `tables`, `results`: the one percentile/median/summary, Markdown result tables,
  results as JSON; `options`: a benchmark's command line from one dataclass.

Faults a fake upstream knob does not cover are injected with `FakeUpstream(fault=...)`.
"""
