"""One module per `simlab` subcommand; each has `register(subparsers)` and a handler that returns an exit code."""
