"""One harness for tests and benchmarks: processes on free ports, config files, load
generators, statistics and result tables. Nothing here is imported by the gateway itself."""
