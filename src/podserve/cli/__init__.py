"""The one `podserve` command. Each subcommand is a module here with a `register` function;
it parses flags, builds settings and calls into a package. Only this package reads the
environment and files for configuration."""
