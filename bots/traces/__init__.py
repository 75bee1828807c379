"""Run traces and metrics: what each run did, recorded as it goes (docs/architecture.md,
"Run traces": `recorder`, `shaping`), and the process's Prometheus metrics (`metrics`,
imported only where served: prometheus-client costs every command its import time)."""
