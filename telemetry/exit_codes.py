"""Exit codes of every `tailtap` verb (stable, for scripts)."""

EXIT_OK = 0
EXIT_INPUT = 1  # an input could not be read at all, a query failed, the daemon failed
EXIT_USAGE = 2  # unknown option, bad value
EXIT_STORE = 3  # the store cannot be used (not writable, missing for a query)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
