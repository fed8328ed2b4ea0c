"""The ingest endpoint: records over HTTP, acknowledged once the in-sync replicas have them."""
