"""The `dstreams` command line: run, demo, config, journal and dev subcommands."""
