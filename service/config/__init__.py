"""Settings: typed, frozen models read from YAML and `DSTREAMS_*` environment overrides."""
