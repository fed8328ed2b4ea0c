"""`python -m service` is the `dstreams` command."""

from service.cli.main import main

if __name__ == "__main__":
    main()
